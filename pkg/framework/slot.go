package framework

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// slot is one framework's plugin: at most one running process at a time, started on
// demand, and the memory of its last failure.
type slot struct {
	host      *Host
	framework string

	// mu serialises starts, restarts and kills; calls run without it.
	mu  sync.Mutex
	cur *instance
	// failure is the last failure, if the plugin has not served since: until RetryAfter
	// has passed, get answers with it instead of starting the plugin again.
	failure  error
	failedAt time.Time
	// goodHints are the hints of the last plugin process that loaded.
	goodHints []exitclass.Hint
}

// instance is one started, checked plugin process.
type instance struct {
	conn  *conn
	info  Info
	hints []exitclass.Hint
}

// get returns the running plugin, starting it if there is none.
func (s *slot) get(ctx context.Context) (*instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host.closed.Load() {
		return nil, s.closedErr()
	}
	if s.cur != nil && !s.cur.conn.exited() {
		return s.cur, nil
	}
	if s.cur != nil {
		// It died between calls. Starting it again is its one restart.
		s.host.log.Warn("framework plugin exited; starting it again", "framework", s.framework, "path", s.cur.conn.path)
		s.cur.conn.kill()
		s.cur = nil
	} else if err := s.recentFailure(); err != nil {
		return nil, err
	}
	return s.startLocked(ctx)
}

// restart replaces old, which crashed during a call, unless another caller already did.
func (s *slot) restart(ctx context.Context, old *instance) (*instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host.closed.Load() {
		return nil, s.closedErr()
	}
	switch {
	case s.cur != nil && s.cur != old:
		return s.cur, nil
	case s.cur == old:
		old.conn.kill()
		s.cur = nil
	default:
		if err := s.recentFailure(); err != nil {
			return nil, err
		}
	}
	return s.startLocked(ctx)
}

// fail records that inst cannot serve and kills it.
func (s *slot) fail(inst *instance, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == inst {
		s.cur = nil
	}
	inst.conn.kill()
	s.failure, s.failedAt = err, s.host.opts.Clock.Now()
}

// stop kills the running plugin, for Close.
func (s *slot) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		s.cur.conn.kill()
		s.cur = nil
	}
}

func (s *slot) lastHints() []exitclass.Hint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.goodHints)
}

func (s *slot) recentFailure() error {
	if s.failure != nil && s.host.opts.Clock.Since(s.failedAt) < s.host.opts.RetryAfter {
		return s.failure
	}
	return nil
}

func (s *slot) closedErr() error {
	return &PluginError{Framework: s.framework, Op: "start", Err: ErrClosed, Fix: "the controller is shutting down"}
}

// startLocked finds, starts and checks the plugin: the handshake and version negotiation,
// then Info and FailureHints, both validated. A plugin that fails any step is killed and
// its failure remembered.
func (s *slot) startLocked(ctx context.Context) (*instance, error) {
	inst, err := s.load(ctx)
	if err != nil {
		if ctx.Err() == nil { // the caller giving up says nothing about the plugin
			s.failure, s.failedAt = err, s.host.opts.Clock.Now()
			s.host.log.Error("framework plugin cannot serve", "framework", s.framework, "error", err)
		}
		return nil, err
	}
	s.cur, s.failure, s.goodHints = inst, nil, inst.hints
	return inst, nil
}

func (s *slot) load(ctx context.Context) (*instance, error) {
	h, fw := s.host, s.framework
	path, err := h.locate(fw)
	if err != nil {
		return nil, &PluginError{Framework: fw, Op: "start", Err: err, Fix: h.installFix(fw)}
	}
	c, err := h.launch(fw, path)
	if err != nil {
		return nil, &PluginError{Framework: fw, Path: path, Op: "start", Err: fmt.Errorf("%w: %v", ErrStart, err),
			Fix: fmt.Sprintf("install a faultline framework plugin built for plugin API version %d to %d at that path (a plugin of another API version, or a binary that is not a plugin, cannot be used); its stderr is in the controller log", MinAPIVersion, APIVersion)}
	}
	h.log.Info("framework plugin started", "framework", fw, "path", path, "pid", c.pid, "apiVersion", c.version)
	inst := &instance{conn: c}
	broken := func(op string, err error, fix string) error {
		c.kill()
		return &PluginError{Framework: fw, Path: path, Op: op, Err: err, Fix: fix}
	}
	const bug = "this is a bug in the plugin: report it to its author or install a fixed binary"

	var info Info
	err = h.invoke(ctx, inst, func(ctx context.Context, p Plugin) (err error) {
		info, err = p.Info(ctx)
		return err
	})
	switch {
	case err != nil && ctx.Err() != nil:
		c.kill()
		return nil, fmt.Errorf("start framework plugin %q: %w", fw, context.Cause(ctx))
	case err != nil:
		return nil, broken("Info", describeLoadError(h, inst, err), bug)
	}
	if err := validateInfo(fw, c.version, info); err != nil {
		return nil, broken("Info", err, fmt.Sprintf("install the plugin of framework %q as %s%s; if it is, %s", fw, BinaryPrefix, fw, bug))
	}
	inst.info = info

	var patterns []HintPattern
	err = h.invoke(ctx, inst, func(ctx context.Context, p Plugin) (err error) {
		patterns, err = p.FailureHints(ctx)
		return err
	})
	switch {
	case err != nil && ctx.Err() != nil:
		c.kill()
		return nil, fmt.Errorf("start framework plugin %q: %w", fw, context.Cause(ctx))
	case err != nil:
		return nil, broken("FailureHints", describeLoadError(h, inst, err), bug)
	}
	hints, dropped, err := compileHints(fw, c.version, patterns)
	if err != nil {
		return nil, broken("FailureHints", err, bug)
	}
	for _, d := range dropped {
		h.log.Warn("framework plugin hint dropped: its cause is an infrastructure cause, which program output cannot prove; a plugin of API version 2 may name only PeerFailure or an application cause",
			"framework", fw, "path", path, "apiVersion", c.version, "pattern", d.Pattern, "cause", d.Cause)
	}
	inst.hints = hints
	return inst, nil
}

// describeLoadError says how a call during the start failed.
func describeLoadError(h *Host, inst *instance, err error) error {
	switch h.classify(context.Background(), inst, err) {
	case callTimedOut:
		return fmt.Errorf("%w: no answer within %s", ErrTimeout, h.opts.CallTimeout)
	case callCrashed:
		return fmt.Errorf("%w: %v", ErrCrashed, err)
	case callGarbage:
		return err
	default:
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
}
