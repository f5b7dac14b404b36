package version_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVersionComesFromTheBuild (issue 59): a binary says the version of the tree it was built
// from, whoever builds it: `go build` (or `go install`) of a checkout at a release tag says
// the tag, and its launcher installs that tag's images; a commit after the tag, with changes
// not committed, says the pseudo-version Go derives from the tag and the commit, +dirty; a
// tree with no tag says dev and why; a version given at link time (-X, as `make release
// VERSION=…` does) wins. Each build is of a copy of this tree, in a git repository of its
// own.
func TestVersionComesFromTheBuild(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on the PATH: the version comes from the checkout's tags")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	repo := copyTree(t, root)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.email=test@faultline.dev", "-c", "user.name=test", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// build builds pkg of the copy as a release would (no -X unless given) and runs it.
	build := func(pkg string, ldflags string, args ...string) string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=true", "-ldflags=-s -w "+ldflags, "-o", bin, pkg)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", pkg, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "the tree")

	untagged := git("rev-parse", "HEAD")
	if got := build("./cmd/launcher", "", "version"); !strings.HasPrefix(got, "launcher dev ") ||
		!strings.Contains(got, "built from commit "+untagged+", which no release tag precedes") || !strings.Contains(got, "faultline-nodeagent:dev") {
		t.Errorf("a tree with no tag: launcher version says\n%s\nwant dev, the commit and why, and the images tagged dev", got)
	}
	git("tag", "v0.9.7") // a v0 or v1 tag: the module's path has no major version suffix
	if got := build("./cmd/launcher", "", "version"); !strings.HasPrefix(got, "launcher v0.9.7 (") || strings.Contains(got, "built from") ||
		!strings.Contains(got, "ghcr.io/faultline-dev/faultline-nodeagent:v0.9.7") {
		t.Errorf("a build at tag v0.9.7: launcher version says\n%s\nwant the version and its images (tag v0.9.7)", got)
	}
	git("commit", "-q", "--allow-empty", "-m", "after the release")
	commit := git("rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pseudo := regexp.MustCompile(`^v0\.9\.8-0\.\d{14}-` + commit[:12] + `\+dirty$`)
	if got := build("./hack/version", ""); !pseudo.MatchString(got) {
		t.Errorf("a modified tree one commit after v0.9.7: version %q, want %s", got, pseudo)
	}
	if got := build("./hack/version", "-X github.com/faultline-dev/faultline/pkg/version.Version=v1.2.3"); got != "v1.2.3" {
		t.Errorf("a version given at link time: %q, want v1.2.3", got)
	}
}

// copyTree copies root's files that git tracks or would (the work tree as it is, without
// what .gitignore leaves out) into a new directory.
func copyTree(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("list the files of %s: %v", root, err)
	}
	dst := t.TempDir()
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}
