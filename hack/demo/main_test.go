package main

import (
	"bytes"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/test/cluster"
)

// TestDemo runs `make demo`'s program end to end, with binaries built for the test and a
// short timeout, and checks the summary it prints.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane; skipped with -short")
	}
	bin := t.TempDir()
	for _, b := range []struct{ pkg, name string }{
		{"./cmd/launcher", ""}, {"./cmd/nodeagent", ""}, {"./plugins/jax", "faultline-plugin-jax"},
	} {
		if _, err := cluster.BuildBinary(bin, b.pkg, b.name); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	start := time.Now()
	code := realMain([]string{"-timeout", "3m", "-bin", bin}, &out)
	t.Logf("demo output (%s):\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if code != 0 {
		t.Fatalf("demo exited %d", code)
	}
	for _, want := range []struct {
		line  string
		limit time.Duration
	}{
		// A restart of 16 workers takes a couple of seconds here; a fail, the settle
		// window (1s) and a little. The limits leave room for a loaded 2-core machine.
		{`time to restart: +(\S+) +\(node shutdown announced → all 16 workers of attempt 2 Running\)`, 30 * time.Second},
		{`time to fail: +(\S+) +\(worker exit 1 → phase Failed\)`, 10 * time.Second},
		{`total wall time: +(\S+) +\(control plane start to cleanup done\)`, 3 * time.Minute},
	} {
		m := regexp.MustCompile(want.line).FindStringSubmatch(out.String())
		if m == nil {
			t.Errorf("the summary has no line matching %q", want.line)
			continue
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Errorf("summary line %q: %v", m[0], err)
			continue
		}
		if d <= 0 || d > want.limit {
			t.Errorf("summary line %q: %s is not within (0, %s]", m[0], d, want.limit)
		}
	}
	for _, want := range []string{"launcher watch` exited 1", "Attempt 2 ended: AppExit", "none on gpu-node-"} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("the demo never says %q", want)
		}
	}
}

// TestDemoRealNodes runs the real-node story (make demo REAL_NODES=1) and checks that it says
// what the real kubelet and program did. It starts two more kubelets beside the real-node
// e2e package's, so it runs only when FAULTLINE_DEMO_REAL_NODES=1 asks for it.
func TestDemoRealNodes(t *testing.T) {
	if testing.Short() || os.Getenv("FAULTLINE_DEMO_REAL_NODES") != "1" {
		t.Skip("set FAULTLINE_DEMO_REAL_NODES=1 to run the demo on real nodes")
	}
	bin := t.TempDir()
	for _, b := range []struct{ pkg, name string }{
		{"./cmd/launcher", ""}, {"./cmd/nodeagent", ""}, {"./plugins/jax", "faultline-plugin-jax"},
	} {
		if _, err := cluster.BuildBinary(bin, b.pkg, b.name); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	code := realMain([]string{"-timeout", "4m", "-bin", bin, "-real-nodes"}, &out)
	t.Logf("demo output:\n%s", out.String())
	if code != 0 {
		t.Fatalf("demo exited %d", code)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`kubelet v1\.36\.\d+, containerd://2\.`),
		regexp.MustCompile(`index \d: exit 143 \(SIGTERM\), DisruptionTarget TerminationByKubelet`),
		regexp.MustCompile(`coordinator: all 4 tasks registered`),
		regexp.MustCompile(`index 1: exit 1 \(the program's own exit\), its error: "ValueError: injected application error`),
		regexp.MustCompile(`time to restart: +\S+ +\(node shutdown announced → all 4 workers of attempt 2 Running\)`),
	} {
		if !want.Match(out.Bytes()) {
			t.Errorf("the demo never says %q", want)
		}
	}
}
