package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// BuildTags are the Makefile's BUILD_TAGS: the build tags of every shipped binary.
const BuildTags = "grpcnotrace"

// BuildBinary builds the command package pkg (e.g. "./cmd/launcher") of the repository into
// dir/name (name "" = the package's base name) and returns the binary's path. TestMain
// calls it once per package.
func BuildBinary(dir, pkg, name string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	if name == "" {
		name = filepath.Base(pkg)
	}
	bin := filepath.Join(dir, name)
	// Built as `make build` builds what ships: stripped, without local paths, with the
	// Makefile's BUILD_TAGS.
	cmd := exec.Command("go", "build", "-trimpath", "-tags", BuildTags, "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// BuildLauncher builds the launcher into dir with the framework plugins next to it, where
// `launcher controller` looks for them by default, and returns the launcher's path.
func BuildLauncher(dir string) (string, error) {
	launcher, err := BuildBinary(dir, "./cmd/launcher", "")
	if err != nil {
		return "", err
	}
	plugins, err := Plugins()
	if err != nil {
		return "", err
	}
	for _, p := range plugins {
		if _, err := BuildBinary(dir, "./plugins/"+p, "faultline-plugin-"+p); err != nil {
			return "", err
		}
	}
	return launcher, nil
}

// Plugins are the framework plugins the product ships: every plugins/<name> with a
// main.go, as the Makefile's build target finds them, so that a new plugin is tested
// without a list to update.
func Plugins() ([]string, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	mains, err := filepath.Glob(filepath.Join(root, "plugins", "*", "main.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, m := range mains {
		names = append(names, filepath.Base(filepath.Dir(m)))
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no framework plugin under %s", filepath.Join(root, "plugins"))
	}
	return names, nil
}

// Process is a product binary run by a test, its output in a log file.
type Process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

// StartProcess starts bin with args, its output in a file under t.TempDir(). The process
// is killed when the test ends, and the last lines of its log are printed if the test failed.
func StartProcess(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	return StartProcessEnv(t, nil, bin, args...)
}

// StartProcessEnv is StartProcess with env ("KEY=value") added to the test's environment,
// e.g. the OTEL_* variables of a process whose spans a test receives.
func StartProcessEnv(t testing.TB, env []string, bin string, args ...string) *Process {
	t.Helper()
	logFile, err := os.CreateTemp(t.TempDir(), filepath.Base(bin)+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	logFile.Close()
	// A temporary directory of its own, removed once it is killed: a process killed leaves
	// what it would have removed on a clean exit (the controller's framework plugins'
	// socket directories), and the machine must be left as it was found. Not the test's
	// own temporary directory: its path, with a test's long name, would make the plugins'
	// socket paths longer than a socket address may be.
	tmp, err := os.MkdirTemp("", "faultline-proc-")
	if err != nil {
		t.Fatal(err)
	}
	p, err := startProcess(logFile.Name(), append(slices.Clone(env), "TMPDIR="+tmp), bin, args...)
	if err != nil {
		os.RemoveAll(tmp)
		t.Fatal(err)
	}
	t.Logf("started %s pid %d (%s), log %s", filepath.Base(bin), p.Pid(), strings.Join(args, " "), p.logPath)
	t.Cleanup(func() {
		p.Stop()
		os.RemoveAll(tmp)
		if t.Failed() {
			t.Logf("%s pid %d log (last 50 lines of %s):\n%s", filepath.Base(bin), p.Pid(), p.logPath, p.Tail(50))
		}
	})
	return p
}

// startProcess starts bin with args and env ("KEY=value", added to this process's
// environment), its output in logPath.
func startProcess(logPath string, env []string, bin string, args ...string) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	// A test or benchmark binary that dies (a panic, a timeout's SIGQUIT) must not leave its
	// processes acting on a later cluster.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s %s: %w", bin, strings.Join(args, " "), err)
	}
	p := &Process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Stop kills the process, if it still runs, and waits for it to exit.
func (p *Process) Stop() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Wait waits for the process to exit and returns its state.
func (p *Process) Wait(ctx context.Context) (*os.ProcessState, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("pid %d still running: %w", p.cmd.Process.Pid, ctx.Err())
	}
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string { return tailFile(p.logPath, n) }

// tailFile returns the last n lines of a log file (or why it cannot).
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// KilledBy reports whether a process state says the process died of signal sig.
func KilledBy(state *os.ProcessState, sig syscall.Signal) bool {
	ws, ok := state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}
