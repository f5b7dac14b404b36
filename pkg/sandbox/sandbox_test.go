package sandbox

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hashicorp/go-plugin"
)

// The test binary plays both parts: the launcher that confines itself (role sandbox) and
// the plugin it becomes (role probe), which tries what a hostile plugin would and reports.
const roleEnv = "FAULTLINE_SANDBOX_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "sandbox":
		os.Setenv(roleEnv, "probe")
		exe, _ := os.Executable()
		fmt.Fprintln(os.Stderr, Exec(exe, []string{exe}))
		os.Exit(3)
	case "probe":
		probe()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// probe tries to read the secret, to connect to the listener, to read its parent's
// environment, and to make its socket in its directory; it prints what each gave.
func probe() {
	out := map[string]string{}
	try := func(what string, err error) {
		out[what] = "ok"
		if err != nil {
			out[what] = err.Error()
		}
	}
	_, err := os.ReadFile(os.Getenv("SECRET"))
	try("secret", err)
	conn, err := net.Dial("tcp", os.Getenv("ADDR"))
	if err == nil {
		conn.Close()
	}
	try("tcp", err)
	_, err = os.ReadFile("/proc/" + strconv.Itoa(os.Getppid()) + "/environ")
	try("parent", err)
	l, err := net.Listen("unix", filepath.Join(os.Getenv(plugin.EnvUnixSocketDir), "plugin.sock"))
	if err == nil {
		l.Close()
	}
	try("socket", err)
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

// run runs the test binary in role with the probe's targets, and returns what the probe
// reported.
func run(t *testing.T, role, secret, addr string) map[string]string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "SECRET="+secret, "ADDR="+addr, plugin.EnvUnixSocketDir+"="+t.TempDir())
	raw, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("%s: %v %s", role, err, msg)
	}
	got := map[string]string{}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%s printed %q: %v", role, raw, err)
	}
	return got
}

// TestPluginCannotReadTheControllersToken: a plugin started confined (Exec) cannot read a
// file of the controller's (its ServiceAccount token stands here as a secret file), connect
// over TCP (the API server), or read its parent's environment; it can make its socket in
// its own directory, as go-plugin needs. The same program unconfined can do all of it.
func TestPluginCannotReadTheControllersToken(t *testing.T) {
	if v, err := Supported(); err != nil {
		t.Skipf("no sandbox to test: %v", err)
	} else {
		t.Logf("Landlock ABI %d", v)
	}
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte("a token"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	free := run(t, "probe", secret, l.Addr().String())
	for _, what := range []string{"secret", "tcp", "parent", "socket"} {
		if free[what] != "ok" {
			t.Fatalf("unconfined, the probe's %s: %s (it must be able to, for the confined run to mean anything)", what, free[what])
		}
	}
	confined := run(t, "sandbox", secret, l.Addr().String())
	for _, what := range []string{"secret", "tcp", "parent"} {
		if confined[what] == "ok" {
			t.Errorf("confined, the plugin could reach the %s", what)
		} else {
			t.Logf("confined %s: %s", what, confined[what])
		}
	}
	if confined["socket"] != "ok" {
		t.Errorf("confined, the plugin cannot make its socket in its directory: %s", confined["socket"])
	}
}
