package shutdown

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// recorder is a Handler that records its calls; block makes ShutdownStarted wait for its
// context.
type recorder struct {
	block     bool
	started   chan time.Time
	cancelled chan time.Time
	ctxErr    chan error
}

func newRecorder() *recorder {
	return &recorder{started: make(chan time.Time, 4), cancelled: make(chan time.Time, 4), ctxErr: make(chan error, 4)}
}

func (r *recorder) ShutdownStarted(ctx context.Context, at time.Time) error {
	r.started <- at
	if r.block {
		<-ctx.Done()
		r.ctxErr <- ctx.Err()
	}
	return nil
}

func (r *recorder) ShutdownCancelled(_ context.Context, at time.Time) error {
	r.cancelled <- at
	return nil
}

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// dialer hands out the given connections in order, then errors.
type dialer struct {
	mu    sync.Mutex
	conns []*FakeLogind
	errs  []error // errs[i] != nil fails the i-th dial
	n     int
}

func (d *dialer) dial(context.Context) (Logind, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := d.n
	d.n++
	if i < len(d.errs) && d.errs[i] != nil {
		return nil, d.errs[i]
	}
	if i >= len(d.conns) {
		return nil, errors.New("no more fake connections")
	}
	return d.conns[i], nil
}

func (d *dialer) dials() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

type harness struct {
	inh    *Inhibitor
	clock  *clocktesting.FakeClock
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func start(t *testing.T, h Handler, d *dialer, mutate func(*Config)) *harness {
	t.Helper()
	logs := &syncBuffer{}
	fc := clocktesting.NewFakeClock(t0)
	cfg := Config{
		Handler:        h,
		Dial:           d.dial,
		ReleaseTimeout: 5 * time.Second,
		MinBackoff:     time.Second,
		MaxBackoff:     4 * time.Second,
		Clock:          fc,
		Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	inh, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inh.Run(ctx) }()
	hs := &harness{inh: inh, clock: fc, logs: logs, cancel: cancel, done: done}
	t.Cleanup(func() { hs.stop(t) })
	return hs
}

func (h *harness) stop(t *testing.T) {
	t.Helper()
	h.once.Do(func() {
		h.cancel()
		select {
		case err := <-h.done:
			if err != nil {
				t.Errorf("Run returned %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

func locks(f *FakeLogind, n int) func() bool {
	return func() bool { return len(f.Locks()) == n }
}

func TestNewRequiresHandler(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a Handler succeeded")
	}
}

func TestShutdownReleasesAndCancelRelocks(t *testing.T) {
	f := NewFakeLogind()
	rec := newRecorder()
	h := start(t, rec, &dialer{conns: []*FakeLogind{f}}, nil)

	eventually(t, "first lock", locks(f, 1))
	eventually(t, "Holding", h.inh.Holding)
	l := f.Locks()[0]
	if got, want := [4]string{l.What, l.Who, l.Why, l.Mode}, [4]string{"shutdown", "faultline-nodeagent", "mark training pods before shutdown", "delay"}; got != want {
		t.Errorf("lock = %q, want %q", got, want)
	}

	f.Emit(true)
	if at := receive(t, "ShutdownStarted", rec.started); !at.Equal(t0) {
		t.Errorf("detectedAt = %v, want the clock's %v", at, t0)
	}
	eventually(t, "lock released", l.Released)
	if h.inh.Holding() {
		t.Error("Holding after the shutdown was handled")
	}

	f.Emit(true) // logind repeats itself: the handler must not run twice
	f.Emit(false)
	receive(t, "ShutdownCancelled", rec.cancelled)
	eventually(t, "lock taken again", locks(f, 2))
	eventually(t, "Holding again", h.inh.Holding)
	if n := len(rec.started); n != 0 {
		t.Errorf("ShutdownStarted ran %d more times for a repeated announcement", n)
	}

	h.stop(t)
	if !f.Locks()[1].Released() {
		t.Error("lock not released on stop")
	}
	if !f.Closed() {
		t.Error("connection not closed on stop")
	}
}

// The release timeout bounds how long the shutdown waits, not what the handler writes: on an
// API server slower than the lock's hold, a pod's evidence still lands. The handler goes on
// until the announcement is withdrawn, and the withdrawal comes only after it stopped.
func TestReleaseTimeoutBoundsTheHoldNotTheHandler(t *testing.T) {
	f := NewFakeLogind()
	rec := newRecorder()
	rec.block = true
	h := start(t, rec, &dialer{conns: []*FakeLogind{f}}, nil)
	eventually(t, "lock", locks(f, 1))

	f.Emit(true)
	receive(t, "ShutdownStarted", rec.started)
	eventually(t, "release timer", h.clock.HasWaiters)
	if f.Locks()[0].Released() {
		t.Fatal("lock released before the handler returned or timed out")
	}
	h.clock.Step(5 * time.Second)
	eventually(t, "lock released after ReleaseTimeout", f.Locks()[0].Released)
	if !strings.Contains(h.logs.String(), "release timeout") {
		t.Errorf("no log about the release timeout:\n%s", h.logs)
	}
	select {
	case err := <-rec.ctxErr:
		t.Fatalf("the handler's context ended at the release (%v): its writes were cut short", err)
	case <-time.After(50 * time.Millisecond):
	}

	// Withdrawn: the lock is taken again, the handler stops, and only then is the
	// announcement taken back.
	f.Emit(false)
	receive(t, "ShutdownCancelled", rec.cancelled)
	select {
	case err := <-rec.ctxErr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("handler context error = %v, want Canceled", err)
		}
	default:
		t.Fatal("ShutdownCancelled ran while the shutdown's handler still ran")
	}
	eventually(t, "lock taken again", locks(f, 2))
	h.stop(t)
}

// A handler that outlives the release and ends on its own says so.
func TestHandlerAfterTheReleaseEnds(t *testing.T) {
	f := NewFakeLogind()
	release := make(chan struct{})
	h := start(t, HandlerFuncs{Started: func(ctx context.Context, _ time.Time) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}, &dialer{conns: []*FakeLogind{f}}, nil)
	eventually(t, "lock", locks(f, 1))
	f.Emit(true)
	eventually(t, "release timer", h.clock.HasWaiters)
	h.clock.Step(5 * time.Second)
	eventually(t, "lock released after ReleaseTimeout", f.Locks()[0].Released)
	close(release)
	eventually(t, "the handler's end logged", func() bool {
		return strings.Contains(h.logs.String(), "shutdown handler done after the lock's release")
	})
	h.stop(t)
}

func TestReconnectsWithBackoffAndHandsTheLockOver(t *testing.T) {
	f1, f2 := NewFakeLogind(), NewFakeLogind()
	d := &dialer{errs: []error{errors.New("no bus"), nil, errors.New("still restarting"), nil}, conns: []*FakeLogind{nil, f1, nil, f2}}
	rec := newRecorder()
	h := start(t, rec, d, nil)

	// First dial fails: wait out MinBackoff.
	eventually(t, "backoff timer", h.clock.HasWaiters)
	h.clock.Step(time.Second)
	eventually(t, "lock on f1", locks(f1, 1))

	f1.Drop()
	eventually(t, "backoff timer", h.clock.HasWaiters)
	h.clock.Step(time.Second) // back to MinBackoff: the f1 session had connected
	eventually(t, "third dial, failing", func() bool { return d.dials() == 3 })
	eventually(t, "doubled backoff timer", h.clock.HasWaiters)
	h.clock.Step(time.Second)
	time.Sleep(20 * time.Millisecond)
	if d.dials() != 3 {
		t.Fatalf("redialled after %v, want the doubled backoff", time.Second)
	}
	h.clock.Step(time.Second)
	eventually(t, "lock on f2", locks(f2, 1))
	if !f1.Locks()[0].Released() {
		t.Error("old lock kept after the new one was taken")
	}
	if f2.Locks()[0].Released() || !h.inh.Holding() {
		t.Error("new lock not held")
	}
	if !strings.Contains(h.logs.String(), "reconnecting") {
		t.Errorf("no reconnect log:\n%s", h.logs)
	}

	// Signals arrive on the new connection.
	f2.Emit(true)
	receive(t, "ShutdownStarted on f2", rec.started)
	eventually(t, "f2 lock released", f2.Locks()[0].Released)
}

func TestCatchesUpOnSignalsMissedWhileDisconnected(t *testing.T) {
	f1, f2, f3 := NewFakeLogind(), NewFakeLogind(), NewFakeLogind()
	f2.Preparing = true // announced while the bus was away
	rec := newRecorder()
	h := start(t, rec, &dialer{conns: []*FakeLogind{f1, f2, f3}}, nil)
	eventually(t, "lock on f1", locks(f1, 1))

	f1.Drop()
	eventually(t, "backoff timer", h.clock.HasWaiters)
	h.clock.Step(time.Second)
	receive(t, "ShutdownStarted without a signal", rec.started)
	eventually(t, "lock released", func() bool { return f1.Locks()[0].Released() && !h.inh.Holding() })
	for _, l := range f2.Locks() {
		if !l.Released() {
			t.Error("a lock is held during the shutdown")
		}
	}

	// Cancelled while away (f3 says not preparing): relock and tell the handler.
	f2.Drop()
	eventually(t, "backoff timer", h.clock.HasWaiters)
	h.clock.Step(time.Second)
	receive(t, "ShutdownCancelled without a signal", rec.cancelled)
	eventually(t, "lock on f3", locks(f3, 1))
	eventually(t, "Holding", h.inh.Holding)
}

func TestInhibitFailureIsRetriedWhileListening(t *testing.T) {
	f := NewFakeLogind()
	f.InhibitErr = errors.New("access denied")
	rec := newRecorder()
	h := start(t, rec, &dialer{conns: []*FakeLogind{f}}, nil)

	eventually(t, "relock timer", h.clock.HasWaiters)
	if h.inh.Holding() {
		t.Fatal("Holding without a lock")
	}
	f.mu.Lock()
	f.InhibitErr = nil
	f.mu.Unlock()
	h.clock.Step(time.Second)
	eventually(t, "lock after retry", locks(f, 1))

	// Still listening all along.
	f.Emit(true)
	receive(t, "ShutdownStarted", rec.started)
}

func TestWarnsWhenLogindDelayIsTooShort(t *testing.T) {
	for name, tc := range map[string]struct {
		delay    time.Duration
		delayErr error
		want     string
		dontWant string
	}{
		"too short":   {delay: time.Second, want: "InhibitDelayMaxUSec is shorter than the agent needs"},
		"long enough": {delay: time.Minute, dontWant: "shorter than the agent needs"},
		"unreadable":  {delayErr: errors.New("no such property"), want: "cannot read logind InhibitDelayMaxUSec"},
	} {
		t.Run(name, func(t *testing.T) {
			f := NewFakeLogind()
			f.Delay, f.DelayErr = tc.delay, tc.delayErr
			h := start(t, newRecorder(), &dialer{conns: []*FakeLogind{f}}, func(c *Config) { c.RequiredDelay = 30 * time.Second })
			eventually(t, "lock", locks(f, 1))
			logs := h.logs.String()
			if tc.want != "" && !strings.Contains(logs, tc.want) {
				t.Errorf("logs lack %q:\n%s", tc.want, logs)
			}
			if tc.dontWant != "" && strings.Contains(logs, tc.dontWant) {
				t.Errorf("logs have %q:\n%s", tc.dontWant, logs)
			}
		})
	}
}

func TestSubscribeFailureReconnects(t *testing.T) {
	f1, f2 := NewFakeLogind(), NewFakeLogind()
	f1.SubscribeErr = errors.New("match rejected")
	h := start(t, newRecorder(), &dialer{conns: []*FakeLogind{f1, f2}}, nil)
	eventually(t, "backoff timer", h.clock.HasWaiters)
	if len(f1.Locks()) != 0 {
		t.Error("locked without a subscription")
	}
	if !f1.Closed() {
		t.Error("failed connection not closed")
	}
	h.clock.Step(time.Second)
	eventually(t, "lock on f2", locks(f2, 1))
}

func TestHandlerFuncs(t *testing.T) {
	var none HandlerFuncs
	if err := none.ShutdownStarted(context.Background(), t0); err != nil {
		t.Error(err)
	}
	if err := none.ShutdownCancelled(context.Background(), t0); err != nil {
		t.Error(err)
	}
	boom := errors.New("boom")
	h := HandlerFuncs{
		Started:   func(context.Context, time.Time) error { return boom },
		Cancelled: func(context.Context, time.Time) error { return boom },
	}
	if err := h.ShutdownStarted(context.Background(), t0); !errors.Is(err, boom) {
		t.Errorf("Started: %v", err)
	}
	if err := h.ShutdownCancelled(context.Background(), t0); !errors.Is(err, boom) {
		t.Errorf("Cancelled: %v", err)
	}
}
