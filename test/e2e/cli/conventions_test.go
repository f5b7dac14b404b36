package cli

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/faultline-dev/faultline/test/cluster"
)

// TestCLIKubectlConventions: the launcher's kubectl flags against a real API server. `get -l`
// selects by label and `-o jsonpath` prints the field; `get -w` prints the run again when it
// changes (here, suspended); `submit --dry-run=server` goes through the CRD's validation (a
// rule the client cannot check refuses the run; a valid run is "created (server dry run)" and
// nothing is stored), while --dry-run=client needs no server.
func TestCLIKubectlConventions(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	defer cancel()

	labelled := strings.Replace(manifest("picked", 1, ""), "  name: picked\n", "  name: picked\n  labels: {team: research}\n", 1)
	requireOutput(t, launcher(ctx, t, c, ns, "submit", "-f", writeFile(t, "a.yaml", labelled)), 0, "stdout", "created")
	requireOutput(t, launcher(ctx, t, c, ns, "submit", "-f", writeFile(t, "b.yaml", manifest("other", 1, ""))), 0, "stdout", "created")
	r := launcher(ctx, t, c, ns, "get", "-l", "team=research", "-o", "jsonpath={.items[*].metadata.name}")
	requireOutput(t, r, 0, "stdout", "picked")
	if strings.Contains(r.stdout, "other") {
		t.Errorf("get -l team=research listed a run without the label: %s", r)
	}
	requireOutput(t, launcher(ctx, t, c, ns, "get", "--no-headers", "--sort-by", ".metadata.name", "-o", "custom-columns=NAME:.metadata.name,WORKERS:.spec.workers"), 0, "stdout", "other")

	// get -w: the list, then a line for each change.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch := exec.CommandContext(wctx, launcherBin, "--kubeconfig", c.Kubeconfig, "-n", ns, "get", "picked", "-w", "--no-headers",
		"-o", "custom-columns=NAME:.metadata.name,SUSPEND:.spec.suspend")
	pipe, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("get -w ended before %s", what)
			}
			return l
		case <-ctx.Done():
			t.Fatalf("get -w printed no line for %s", what)
		}
		return ""
	}
	if l := next("the run as it is"); !regexp.MustCompile(`^picked\s+<none>$`).MatchString(l) {
		t.Errorf("get -w first line %q, want the run, not suspended", l)
	}
	requireOutput(t, launcher(ctx, t, c, ns, "suspend", "picked"), 0, "stdout", "picked")
	for {
		if l := next("the suspension"); regexp.MustCompile(`^picked\s+true$`).MatchString(l) {
			break
		}
	}
	stopWatch()
	_ = watch.Wait()

	// The CRD's CEL rules: the client checks them offline as the server does, in its words.
	bad := strings.Replace(manifest("badlabel", 1, ""), "    spec:\n      containers:", "    metadata:\n      labels: {faultline.dev/run: mine}\n    spec:\n      containers:", 1)
	badFile := writeFile(t, "bad.yaml", bad)
	for _, dry := range []string{"--dry-run=client", "--dry-run=server"} {
		requireOutput(t, launcher(ctx, t, c, ns, "submit", "-f", badFile, dry), 2, "stderr", "spec.template.metadata.labels must not use keys under faultline.dev/")
	}
	requireOutput(t, launcher(ctx, t, c, ns, "submit", "-f", writeFile(t, "ok.yaml", manifest("dry", 1, "")), "--dry-run=server"), 0, "stdout",
		"trainingrun.faultline.dev/dry created (server dry run)")
	requireOutput(t, launcher(ctx, t, c, ns, "get", "dry"), 2, "stderr", "not found")
	requireOutput(t, launcher(ctx, t, c, ns, "run", "--name", "srv", "--image", "i", "--workers", "2", "--dry-run=server"), 0, "stdout",
		"resetAfterSeconds: 600", "infrastructure: 10") // the CRD's defaults, filled in by the server
}

// TestCLIConvertedRunsAreValid: every manifest of pkg/convert's tests (in the shape of JobSet's,
// Kubeflow training-operator's and Trainer's own examples), converted by `launcher convert`,
// is a TrainingRun the API server accepts (`submit --dry-run=server`: its schema and CEL rules).
func TestCLIConvertedRunsAreValid(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	defer cancel()
	files, err := filepath.Glob(filepath.Join(c.Tools.Root, "pkg", "convert", "testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifest in pkg/convert/testdata: %v", err)
	}
	namespace := regexp.MustCompile(`(?m)^  namespace: .*\n`)
	for _, f := range files {
		r := launcher(ctx, t, c, "", "convert", "-f", f)
		if r.code != 0 && r.code != 3 {
			t.Errorf("convert %s: %s", filepath.Base(f), r)
			continue
		}
		// Into the test's namespace: the sources' own do not exist here.
		run := namespace.ReplaceAllString(r.stdout, "")
		requireOutput(t, launcher(ctx, t, c, ns, "submit", "-f", writeFile(t, filepath.Base(f), run), "--dry-run=server"), 0, "stdout", "created (server dry run)")
	}
}
