//go:build !linux

package inplace

import (
	"context"
	"fmt"
	"time"

	"github.com/faultline-dev/faultline/pkg/barrier"
)

// openBySocket reaches a container's root through Linux's /proc only: elsewhere the agent
// execs.
func (r *Restarter) openBySocket(context.Context, string, int, int) error {
	return fmt.Errorf("%w: not on Linux", errNoSocket)
}

// stopBySocket, as openBySocket, is Linux's only.
func (r *Restarter) stopBySocket(context.Context, string, int, time.Duration) (*barrier.Save, error) {
	return nil, fmt.Errorf("%w: not on Linux", errNoSocket)
}

// checkpointBySocket, as openBySocket, is Linux's only.
func (r *Restarter) checkpointBySocket(context.Context, string, int, string, time.Duration) (barrier.CheckpointAnswer, error) {
	return barrier.CheckpointAnswer{}, fmt.Errorf("%w: not on Linux", errNoSocket)
}
