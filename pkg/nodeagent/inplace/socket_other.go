//go:build !linux

package inplace

import (
	"context"
	"fmt"
)

// openBySocket reaches a container's root through Linux's /proc only: elsewhere the agent
// execs.
func (r *Restarter) openBySocket(context.Context, string, int) error {
	return fmt.Errorf("%w: not on Linux", errNoSocket)
}
