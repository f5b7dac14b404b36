package framework

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// conn is a started plugin process as the host uses it.
type conn struct {
	path    string
	pid     int
	plugin  Plugin
	version int // the negotiated API version
	// kill ends the process; it returns within killTimeout, whatever state the process is in.
	kill   func()
	exited func() bool
}

// launchFunc starts the plugin binary at path and dispenses its Plugin. Tests replace it
// with one that serves in process.
type launchFunc func(framework, path string) (*conn, error)

var execLookPath = exec.LookPath

// killGrace is how long go-plugin's graceful shutdown may take before the process is
// SIGKILLed: a frozen process never answers the shutdown request.
const killGrace = 3 * time.Second

// launchProcess starts a plugin process through go-plugin: handshake, version negotiation
// (VersionedPlugins), then the gRPC connection over mTLS on a Unix socket.
func (h *Host) launchProcess(framework, path string) (*conn, error) {
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "framework-plugin." + framework,
		Output:     h.opts.PluginLog,
		Level:      hclog.Debug, // what the plugin writes to its stderr outside its log (a Go crash) is logged at Debug
		JSONFormat: true,
	})
	cmd := exec.Command(path)
	if h.opts.Command != nil {
		cmd = h.opts.Command(path)
	}
	// The plugin makes its socket in a directory of its own (go-plugin's variable; the
	// host's environment follows it): a confined plugin may write nowhere else.
	dir, err := os.MkdirTemp("", "faultline-plugin-"+framework+"-")
	if err != nil {
		return nil, fmt.Errorf("make the plugin's socket directory: %w", err)
	}
	cmd.Env = append(cmd.Env, plugin.EnvUnixSocketDir+"="+dir)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  HandshakeConfig,
		VersionedPlugins: PluginSets(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           logger,
		SyncStdout:       &lineLog{log: logger, stream: "stdout"},
		SyncStderr:       &lineLog{log: logger, stream: "stderr"},
		StartTimeout:     h.opts.StartTimeout,
		AutoMTLS:         true,
	})
	kill := func() {
		client.Kill()
		_ = os.RemoveAll(dir)
	}
	rpc, err := client.Client()
	if err != nil {
		kill()
		return nil, err
	}
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		kill()
		return nil, err
	}
	version := client.NegotiatedVersion()
	var p Plugin
	if version >= MinAPIVersion && version <= APIVersion {
		// Every version so far is the one service, read through one client.
		p, _ = raw.(Plugin)
	}
	if p == nil {
		kill()
		return nil, fmt.Errorf("negotiated API version %d, which this host cannot use", version)
	}
	pid := 0
	if rc := client.ReattachConfig(); rc != nil {
		pid = rc.Pid
	}
	end := killer(client, pid)
	return &conn{path: path, pid: pid, plugin: p, version: version, kill: func() { end(); _ = os.RemoveAll(dir) }, exited: client.Exited}, nil
}

// killer ends a plugin process: go-plugin's Kill (a graceful shutdown request, then a
// kill after 2 s), and a SIGKILL by pid when even that does not return, as with a
// stopped or wedged process whose end of the connection never answers.
func killer(client *plugin.Client, pid int) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			done := make(chan struct{})
			go func() {
				client.Kill()
				close(done)
			}()
			select {
			case <-done:
				return
			case <-time.After(killGrace):
			}
			if p, err := os.FindProcess(pid); err == nil && pid > 0 {
				_ = p.Kill()
			}
			select {
			case <-done:
			case <-time.After(killGrace):
			}
		})
	}
}

// find locates faultline-plugin-<framework>: in the plugin directory, then in PATH.
func (h *Host) find(framework string) (string, error) {
	name := BinaryPrefix + framework
	var looked []string
	if dir := h.opts.PluginDir; dir != "" {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.Mode().IsRegular():
			return "", fmt.Errorf("%w: %s is not a regular file", ErrNotFound, p)
		case err == nil && fi.Mode().Perm()&0o111 == 0:
			return "", fmt.Errorf("%w: %s is not executable (mode %s)", ErrNotFound, p, fi.Mode().Perm())
		case err == nil:
			return p, nil
		case !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("%w: %v", ErrNotFound, err)
		}
		looked = append(looked, "the plugin directory "+dir)
	}
	p, err := h.lookPath(name)
	if err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		return p, nil
	}
	looked = append(looked, "PATH")
	return "", fmt.Errorf("%w: no executable %s in %s", ErrNotFound, name, strings.Join(looked, " or in "))
}

// installFix says how to get a missing plugin, naming the frameworks that are installed.
func (h *Host) installFix(framework string) string {
	where := "PATH"
	if h.opts.PluginDir != "" {
		where = "the controller's --plugin-dir (" + h.opts.PluginDir + ") or PATH"
	}
	return fmt.Sprintf("install %s%s into %s, or set spec.framework to an installed framework (%s)",
		BinaryPrefix, framework, where, strings.Join(h.available(), ", "))
}

// available lists the frameworks whose plugin binaries are installed, and none.
func (h *Host) available() []string {
	names := []string{v1alpha1.FrameworkNone}
	dirs := filepath.SplitList(os.Getenv("PATH"))
	if h.opts.PluginDir != "" {
		dirs = append([]string{h.opts.PluginDir}, dirs...)
	}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			fw, ok := strings.CutPrefix(e.Name(), BinaryPrefix)
			if !ok || fw == "" || slices.Contains(names, fw) {
				continue
			}
			if fi, err := e.Info(); err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0 {
				names = append(names, fw)
			}
		}
	}
	slices.Sort(names[1:])
	return names
}

// lineLog logs what a plugin writes to os.Stdout or os.Stderr (which go-plugin streams to
// the host) line by line.
type lineLog struct {
	log    hclog.Logger
	stream string

	mu  sync.Mutex
	buf []byte
}

func (w *lineLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.log.Info(string(w.buf[:i]), "stream", w.stream)
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64*1024 { // a line without an end: log what there is
		w.log.Info(string(w.buf), "stream", w.stream)
		w.buf = nil
	}
	return len(p), nil
}
