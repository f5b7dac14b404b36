package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestDefaultReportLeavesTheTreeClean: `make bench` passes no -out, so the default report,
// with the plots and profiles named after it, must land where git ignores it; and two runs
// must not share a directory, or the second would overwrite the first's plots.
func TestDefaultReportLeavesTheTreeClean(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	// The bench runs from the repository root (go run ./bench); its tests run in bench/.
	root := ".."
	if err := exec.Command(git, "-C", root, "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	start := time.Date(2026, 11, 25, 14, 3, 7, 0, time.Local)
	report := defaultOut(start)
	stem := report[:len(report)-len(filepath.Ext(report))]
	for _, path := range []string{report, stem + "-shutdown-qps0.png", stem + "-controller-steady.pprof", stem + "-apiserver-faultline-inplace-256-workers-qps0.pprof"} {
		// check-ignore exits 0 for an ignored path, 1 for one that git would show.
		err := exec.Command(git, "-C", root, "check-ignore", "-q", "--no-index", path).Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit) && exit.ExitCode() == 1:
			t.Errorf("a default bench run writes %s, which git does not ignore: `make bench` would dirty the tree", path)
		default:
			t.Fatalf("git check-ignore %s: %v", path, err)
		}
	}
	if next := defaultOut(start.Add(time.Second)); filepath.Dir(next) == filepath.Dir(report) {
		t.Errorf("runs a second apart share the directory %s", filepath.Dir(report))
	}
}
