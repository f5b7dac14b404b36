package shutdown

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// The inhibitor lock the agent takes; who and why show in `systemd-inhibit --list`.
const (
	inhibitWhat = "shutdown"
	inhibitWho  = "faultline-nodeagent"
	inhibitWhy  = "mark training pods before shutdown"
	inhibitMode = "delay"
)

// Defaults for Config.
const (
	DefaultReleaseTimeout = 10 * time.Second
	DefaultMinBackoff     = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
)

// Config configures an Inhibitor. Only Handler is required.
type Config struct {
	Handler Handler
	// Dial connects to logind; nil means BusDialer("") (the system bus).
	Dial DialFunc
	// ReleaseTimeout bounds how long the handler may hold the shutdown back.
	ReleaseTimeout time.Duration
	// RequiredDelay is how long the agent needs the shutdown held back; a logind
	// InhibitDelayMaxUSec below it is logged as a warning (logind releases delay locks after
	// that time whatever the agent is doing). Zero means ReleaseTimeout.
	RequiredDelay time.Duration
	// MinBackoff and MaxBackoff bound the reconnect (and re-lock) backoff, which doubles.
	MinBackoff, MaxBackoff time.Duration
	Clock                  clock.Clock
	Logger                 *slog.Logger
}

// Inhibitor holds the logind delay lock and runs the Handler on PrepareForShutdown.
type Inhibitor struct {
	cfg Config
	log *slog.Logger

	// Owned by the Run goroutine.
	lock         io.Closer // the lock held now, or nil
	shuttingDown bool      // PrepareForShutdown(true) seen and not cancelled
	// handling is the shutdown's handler that still runs after the lock was released at
	// ReleaseTimeout, or nil.
	handling *handlerRun

	holding atomic.Bool
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Inhibitor, error) {
	if cfg.Handler == nil {
		return nil, errors.New("shutdown: Config.Handler is required")
	}
	if cfg.Dial == nil {
		cfg.Dial = BusDialer("")
	}
	if cfg.ReleaseTimeout <= 0 {
		cfg.ReleaseTimeout = DefaultReleaseTimeout
	}
	if cfg.RequiredDelay <= 0 {
		cfg.RequiredDelay = cfg.ReleaseTimeout
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Inhibitor{cfg: cfg, log: cfg.Logger.With("component", "shutdown-inhibitor")}, nil
}

// Holding reports whether the delay lock is held now (a readiness signal: without it a
// shutdown does not wait for the agent).
func (i *Inhibitor) Holding() bool { return i.holding.Load() }

// Run holds the lock and watches for shutdowns until ctx is done, reconnecting with backoff
// whenever the bus goes away. It releases the lock and returns nil when ctx is done. Call it
// once.
func (i *Inhibitor) Run(ctx context.Context) error {
	defer i.release("agent stopping")
	backoff := i.cfg.MinBackoff
	for {
		connected, err := i.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			backoff = i.cfg.MinBackoff
		}
		i.log.Warn("logind connection lost; reconnecting", "error", err, "retryIn", backoff)
		if !i.sleep(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, i.cfg.MaxBackoff)
	}
}

// session runs one bus connection until it is lost (an error) or ctx is done. connected says
// whether it got as far as subscribing, which resets the backoff.
func (i *Inhibitor) session(ctx context.Context) (connected bool, err error) {
	conn, err := i.cfg.Dial(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close() }()

	// Subscribe before locking: a shutdown announced in between would otherwise be missed
	// while the lock holds it back for nothing.
	signals, err := conn.PrepareForShutdown(ctx)
	if err != nil {
		return false, err
	}
	i.checkDelay(ctx, conn)

	// relock retries a failed Inhibit with backoff, while the session keeps listening.
	relock := retryTimer{clock: i.cfg.Clock}
	defer relock.stop()
	backoff := i.cfg.MinBackoff
	lock := func() {
		if i.ensureLock(ctx, conn) {
			relock.stop()
			backoff = i.cfg.MinBackoff
			return
		}
		i.log.Info("retrying the inhibitor lock", "retryIn", backoff)
		relock.arm(backoff)
		backoff = min(2*backoff, i.cfg.MaxBackoff)
	}

	lock()
	i.catchUp(ctx, conn, lock)
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-relock.C():
			lock()
		case active, ok := <-signals:
			if !ok {
				return true, errors.New("bus connection closed")
			}
			if active {
				i.started(ctx)
				relock.stop()
			} else if i.shuttingDown {
				i.cancelled(ctx, lock)
			}
		}
	}
}

// catchUp reconciles with logind's state after a (re)connect: a shutdown announced or
// cancelled while the bus was away produced signals this connection never saw.
func (i *Inhibitor) catchUp(ctx context.Context, conn Logind, lock func()) {
	preparing, err := conn.PreparingForShutdown(ctx)
	if err != nil {
		i.log.Warn("cannot read logind PreparingForShutdown", "error", err)
		return
	}
	switch {
	case preparing && !i.shuttingDown:
		i.log.Info("shutdown was announced while disconnected from logind")
		i.started(ctx)
	case !preparing && i.shuttingDown:
		i.log.Info("shutdown was cancelled while disconnected from logind")
		i.cancelled(ctx, lock)
	}
}

func (i *Inhibitor) checkDelay(ctx context.Context, conn Logind) {
	maxDelay, err := conn.InhibitDelayMax(ctx)
	if err != nil {
		i.log.Warn("cannot read logind InhibitDelayMaxUSec", "error", err)
		return
	}
	if maxDelay < i.cfg.RequiredDelay {
		i.log.Warn("logind InhibitDelayMaxUSec is shorter than the agent needs; raise InhibitDelayMaxSec in logind.conf",
			"inhibitDelayMax", maxDelay, "required", i.cfg.RequiredDelay)
		return
	}
	i.log.Debug("logind inhibit delay", "inhibitDelayMax", maxDelay)
}

// ensureLock takes a fresh lock unless a shutdown is under way; false when Inhibit failed.
// A lock from an earlier connection is released only after the new one is taken, so no
// shutdown slips through the gap.
func (i *Inhibitor) ensureLock(ctx context.Context, conn Logind) bool {
	if i.shuttingDown {
		return true
	}
	lock, err := conn.Inhibit(ctx, inhibitWhat, inhibitWho, inhibitWhy, inhibitMode)
	if err != nil {
		// Keep listening: without the lock logind does not wait, but the signal still
		// gives the agent the head start of the pods' termination grace period.
		i.log.Error("cannot take logind delay inhibitor lock", "error", err)
		return false
	}
	i.release("replaced by a new lock")
	i.lock = lock
	i.holding.Store(true)
	i.log.Info("holding logind delay inhibitor lock", "what", inhibitWhat, "mode", inhibitMode)
	return true
}

func (i *Inhibitor) release(why string) {
	if i.lock == nil {
		return
	}
	if err := i.lock.Close(); err != nil {
		i.log.Warn("closing inhibitor lock", "error", err)
	}
	i.lock = nil
	i.holding.Store(false)
	i.log.Info("released logind delay inhibitor lock", "why", why)
}

// started runs the handler for an announced shutdown and holds the shutdown back for it up to
// ReleaseTimeout, then lets the shutdown go on (the handler too, if it still runs).
func (i *Inhibitor) started(ctx context.Context) {
	if i.shuttingDown {
		return // a repeated announcement; the handler already ran
	}
	i.shuttingDown = true
	detectedAt := i.cfg.Clock.Now()
	i.log.Info("logind announced shutdown", "detectedAt", detectedAt)
	run := i.goRun(ctx, func(ctx context.Context) error {
		err := i.cfg.Handler.ShutdownStarted(ctx, detectedAt)
		if took := i.cfg.Clock.Since(detectedAt); took >= i.cfg.ReleaseTimeout {
			i.log.Info("shutdown handler done after the lock's release", "took", took, "error", err)
		}
		return err
	})
	switch i.waitHandler(ctx, run) {
	case handlerReturned:
		if run.err != nil {
			i.log.Error("shutdown handler failed", "error", run.err)
		}
		i.release(fmt.Sprintf("shutdown handled in %v", i.cfg.Clock.Since(detectedAt)))
	case handlerOutlived:
		// The shutdown may not wait longer, but what the handler writes still counts (the
		// evidence of a pod its node is stopping, on an API server slower than the lock's
		// hold): it goes on until it is done, the announcement is withdrawn or the agent stops.
		i.handling = run
		i.release(fmt.Sprintf("the handler still runs after the release timeout (%v); it goes on", i.cfg.ReleaseTimeout))
	case handlerStopped:
		run.cancel()
		<-run.done
	}
}

// handlerEnd is how a wait for a handler's run ended (waitHandler).
type handlerEnd int

const (
	handlerReturned handlerEnd = iota // it returned within the release timeout
	handlerOutlived                   // the release timeout passed first
	handlerStopped                    // the inhibitor stops
)

// waitHandler waits for run to return, up to the release timeout. Its timer is stopped
// before it returns, ahead of any release: a test's fake clock counts a pending timer as a
// waiter.
func (i *Inhibitor) waitHandler(ctx context.Context, run *handlerRun) handlerEnd {
	timeout := i.cfg.Clock.NewTimer(i.cfg.ReleaseTimeout)
	defer timeout.Stop()
	select {
	case <-run.done:
		return handlerReturned
	case <-timeout.C():
		return handlerOutlived
	case <-ctx.Done():
		return handlerStopped
	}
}

// handlerRun is one run of a Handler's method.
type handlerRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when it returned, with err set
	err    error
}

// goRun runs fn in a goroutine of its own, with a context that ends when ctx does or when the
// run is cancelled: its caller decides what the release timeout does to it (waitHandler).
func (i *Inhibitor) goRun(ctx context.Context, fn func(context.Context) error) *handlerRun {
	hctx, cancel := context.WithCancel(ctx)
	run := &handlerRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		defer cancel()
		run.err = fn(hctx)
	}()
	return run
}

// stopHandling ends a shutdown's handler that outlived the release before the announcement
// is withdrawn: the withdrawal must come after every write of the shutdown, never beside one.
// It waits for the handler's return up to ReleaseTimeout (every write it makes ends with its
// context).
func (i *Inhibitor) stopHandling() {
	run := i.handling
	if run == nil {
		return
	}
	i.handling = nil
	run.cancel()
	if i.waitHandler(context.Background(), run) == handlerOutlived {
		i.log.Error("the withdrawn shutdown's handler did not stop within the release timeout; withdrawing beside it", "timeout", i.cfg.ReleaseTimeout)
	}
}

// cancelled takes the lock again first (the next shutdown may come at once), then tells the
// handler.
func (i *Inhibitor) cancelled(ctx context.Context, lock func()) {
	i.shuttingDown = false
	at := i.cfg.Clock.Now()
	i.log.Info("logind cancelled shutdown", "at", at)
	lock()
	i.stopHandling()
	if err := i.bounded(ctx, func(ctx context.Context) error {
		return i.cfg.Handler.ShutdownCancelled(ctx, at)
	}); err != nil {
		i.log.Error("shutdown-cancelled handler failed", "error", err)
	}
}

// errReleaseTimeout: the cancelled handler was still running after ReleaseTimeout.
var errReleaseTimeout = errors.New("handler still running after the release timeout; its context is cancelled")

// bounded runs fn for at most ReleaseTimeout on the injected clock, cancelling its context
// when it is abandoned.
func (i *Inhibitor) bounded(ctx context.Context, fn func(context.Context) error) error {
	run := i.goRun(ctx, fn)
	defer run.cancel()
	switch i.waitHandler(ctx, run) {
	case handlerReturned:
		return run.err
	case handlerOutlived:
		return fmt.Errorf("%w (%v)", errReleaseTimeout, i.cfg.ReleaseTimeout)
	default:
		return ctx.Err()
	}
}

// sleep waits d on the injected clock; false when ctx ended first.
func (i *Inhibitor) sleep(ctx context.Context, d time.Duration) bool {
	t := i.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// retryTimer is a re-armable timer on the injected clock; C is nil (never ready) when it is
// not armed. Stopping it matters with a fake clock, which counts pending timers as waiters.
type retryTimer struct {
	clock clock.Clock
	t     clock.Timer
}

func (r *retryTimer) arm(d time.Duration) {
	r.stop()
	r.t = r.clock.NewTimer(d)
}

func (r *retryTimer) stop() {
	if r.t != nil {
		r.t.Stop()
		r.t = nil
	}
}

func (r *retryTimer) C() <-chan time.Time {
	if r.t == nil {
		return nil
	}
	return r.t.C()
}
