// Package login1sim simulates the piece of a node that faultline's node agent listens to
// for shutdowns: a private D-Bus system bus (a real dbus-daemon) with a stand-in for
// systemd-logind that hands out inhibitor locks and announces PrepareForShutdown. Tests and
// the demo use it; the agent itself talks to it exactly as it talks to the real logind.
package login1sim

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DBusDaemon is where Debian's dbus package installs the daemon.
const DBusDaemon = "/usr/bin/dbus-daemon"

const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// Bus is a dbus-daemon on a private socket; it can be restarted on the same address.
type Bus struct {
	// Address is the bus address to give to clients (DBUS_SYSTEM_BUS_ADDRESS form).
	Address string
	dir     string
	config  string
	socket  string
	cmd     *exec.Cmd
	mu      sync.Mutex
	stderr  bytes.Buffer
}

// StartBus starts a dbus-daemon with a socket in a fresh directory. Stop it with Stop.
func StartBus() (*Bus, error) {
	if _, err := os.Stat(DBusDaemon); err != nil {
		return nil, fmt.Errorf("%s not available (install Debian's dbus package): %w", DBusDaemon, err)
	}
	// Unix socket paths are limited to 108 bytes: keep the directory short.
	dir, err := os.MkdirTemp("", "fl-bus")
	if err != nil {
		return nil, err
	}
	b := &Bus{dir: dir, socket: filepath.Join(dir, "bus"), config: filepath.Join(dir, "bus.conf")}
	if err := os.WriteFile(b.config, fmt.Appendf(nil, busConfig, b.socket), 0o600); err != nil {
		return nil, err
	}
	if err := b.start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return b, nil
}

func (b *Bus) start() error {
	_ = os.Remove(b.socket)
	cmd := exec.Command(DBusDaemon, "--config-file="+b.config, "--nofork", "--print-address")
	// A test binary that dies (a timeout, a panic) must not leave its buses running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = &lockedWriter{mu: &b.mu, w: &b.stderr}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dbus-daemon: %w", err)
	}
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	select {
	case a := <-addr:
		if a == "" {
			_ = cmd.Process.Kill()
			return fmt.Errorf("dbus-daemon printed no address: %s", b.Stderr())
		}
		b.Address = a
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("dbus-daemon did not print its address in 10s")
	}
	b.cmd = cmd
	return nil
}

// Restart stops the daemon and starts it again on the same socket, as when the system bus
// restarts under the agent.
func (b *Bus) Restart() error {
	b.stop()
	return b.start()
}

func (b *Bus) stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Wait()
	b.cmd = nil
}

// Stop stops the daemon and removes its directory.
func (b *Bus) Stop() {
	b.stop()
	_ = os.RemoveAll(b.dir)
}

// Stderr is what the daemon has written to stderr (for test failure messages).
func (b *Bus) Stderr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stderr.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
