//go:build !linux

package barrier

import (
	"context"
	"errors"
)

// Supervise needs Linux (a subreaper, /proc): elsewhere the barrier cannot see to it that
// none of its worker's processes outlives a stop.
func Supervise(context.Context, Config, []string) (int, error) {
	return 1, errors.New("supervise runs on Linux only")
}
