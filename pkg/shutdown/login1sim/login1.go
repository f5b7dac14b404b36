package login1sim

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/faultline-dev/faultline/pkg/shutdown/login1"
)

// HandOver is how long Login1 keeps its own copy of a lock's descriptor after Inhibit
// returns: the reply carries a duplicate, and once the holder has it, only the holder's
// copy may keep the lock alive (as with logind, which keeps none). A check that a lock is
// still held must therefore look for longer than HandOver.
const HandOver = 500 * time.Millisecond

// Login1 owns org.freedesktop.login1 on a bus and plays logind's part in a shutdown.
type Login1 struct {
	conn *dbus.Conn

	mu        sync.Mutex
	delay     time.Duration
	preparing bool

	locks chan *Lock
}

// Lock is an inhibitor lock that Login1 handed out.
type Lock struct {
	What, Who, Why, Mode string
	r                    *os.File
}

// Released reports whether the holder released the lock (closed its descriptor) within d.
func (l *Lock) Released(d time.Duration) bool {
	_ = l.r.SetReadDeadline(time.Now().Add(d))
	var buf [1]byte
	_, err := l.r.Read(buf[:])
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// Serve connects to the bus at address and serves logind's Manager there, announcing
// InhibitDelayMaxUSec = inhibitDelayMax.
func Serve(address string, inhibitDelayMax time.Duration) (*Login1, error) {
	conn, err := dbus.Connect(address)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", address, err)
	}
	l := &Login1{conn: conn, delay: inhibitDelayMax, locks: make(chan *Lock, 64)}
	if err := conn.Export(managerMethods{l}, login1.Path, login1.Manager); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if err := conn.Export(propertiesMethods{l}, login1.Path, login1.PropertiesInterface); err != nil {
		_ = conn.Close()
		return nil, err
	}
	reply, err := conn.RequestName(login1.Service, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		_ = conn.Close()
		return nil, fmt.Errorf("own %s: reply %v, %v", login1.Service, reply, err)
	}
	return l, nil
}

// Close leaves the bus.
func (l *Login1) Close() error { return l.conn.Close() }

// PrepareForShutdown announces a shutdown (true) or its cancellation (false).
func (l *Login1) PrepareForShutdown(active bool) error {
	l.mu.Lock()
	l.preparing = active
	l.mu.Unlock()
	if err := l.conn.Emit(login1.Path, login1.Manager+"."+login1.SignalPrepareForShutdown, active); err != nil {
		return fmt.Errorf("emit %s(%v): %w", login1.SignalPrepareForShutdown, active, err)
	}
	return nil
}

// Locks delivers every lock handed out, in order.
func (l *Login1) Locks() <-chan *Lock { return l.locks }

type managerMethods struct{ l *Login1 }

func (m managerMethods) Inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	select {
	case m.l.locks <- &Lock{What: what, Who: who, Why: why, Mode: mode, r: r}:
	default: // nobody is watching locks; keep serving
	}
	fd := w.Fd() // before the close below may run
	time.AfterFunc(HandOver, func() { _ = w.Close() })
	return dbus.UnixFD(fd), nil
}

type propertiesMethods struct{ l *Login1 }

func (p propertiesMethods) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	if iface != login1.Manager {
		return dbus.Variant{}, dbus.MakeFailedError(fmt.Errorf("unknown interface %s", iface))
	}
	switch name {
	case login1.PropInhibitDelayMax:
		return dbus.MakeVariant(uint64(p.l.delay / time.Microsecond)), nil
	case login1.PropPreparingForShutdown:
		return dbus.MakeVariant(p.l.preparing), nil
	}
	return dbus.Variant{}, dbus.MakeFailedError(fmt.Errorf("unknown property %s", name))
}
