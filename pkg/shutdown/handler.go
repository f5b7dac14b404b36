package shutdown

import (
	"context"
	"time"
)

// Handler is what the node agent does about a shutdown.
type Handler interface {
	// ShutdownStarted runs while the delay lock still holds the shutdown back; the lock is
	// released when it returns or when Config.ReleaseTimeout passes, whichever is first. It
	// may go on after that release: its context ends when the announcement is withdrawn
	// (ShutdownCancelled runs only once it returned) or the inhibitor stops. detectedAt is
	// when the agent received the signal.
	ShutdownStarted(ctx context.Context, detectedAt time.Time) error
	// ShutdownCancelled runs when logind withdraws the announcement, after the lock has been
	// taken again (the next shutdown may follow at once), bounded like ShutdownStarted.
	ShutdownCancelled(ctx context.Context, at time.Time) error
}

// HandlerFuncs adapts functions to Handler; a nil function does nothing.
type HandlerFuncs struct {
	Started   func(ctx context.Context, detectedAt time.Time) error
	Cancelled func(ctx context.Context, at time.Time) error
}

var _ Handler = HandlerFuncs{}

// ShutdownStarted calls Started.
func (h HandlerFuncs) ShutdownStarted(ctx context.Context, at time.Time) error {
	if h.Started == nil {
		return nil
	}
	return h.Started(ctx, at)
}

// ShutdownCancelled calls Cancelled.
func (h HandlerFuncs) ShutdownCancelled(ctx context.Context, at time.Time) error {
	if h.Cancelled == nil {
		return nil
	}
	return h.Cancelled(ctx, at)
}
