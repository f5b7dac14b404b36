package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// checkVersions: deploy.md's "Supported versions" says what is pinned. The default
// installation's minimum is the oldest supported Kubernetes (hack/tools/kubernetes-oldest);
// the table of what a newer Kubernetes adds has one column for the newest pinned
// (hack/tools) and one for the oldest; the Tested line names both releases exactly and the
// second leg's package (test/e2e/oldest) that runs the oldest.
func checkVersions(t *testing.T) {
	newest, oldest := pinned(t, "../hack/tools/go.mod"), pinned(t, "../hack/tools/kubernetes-oldest/go.mod")
	b, err := os.ReadFile("deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if m := regexp.MustCompile(`The default installation needs Kubernetes (\d+\.\d+) or later`).FindStringSubmatch(doc); m == nil {
		t.Error(`deploy.md does not say "The default installation needs Kubernetes X.Y or later"`)
	} else if m[1] != minor(oldest) {
		t.Errorf("deploy.md says the default installation needs Kubernetes %s; the oldest supported pinned is %s (hack/tools/kubernetes-oldest)", m[1], oldest)
	}
	header := regexp.MustCompile(`(?m)^\| what \| Kubernetes (\d+\.\d+) \(newest tested\) \| Kubernetes (\d+\.\d+) \(oldest supported\) \|$`).FindStringSubmatch(doc)
	switch {
	case header == nil:
		t.Error("deploy.md has no table of what a newer Kubernetes adds (| what | Kubernetes X.Y (newest tested) | Kubernetes X.Y (oldest supported) |)")
	case header[1] != minor(newest) || header[2] != minor(oldest):
		t.Errorf("deploy.md's table compares Kubernetes %s with %s; pinned are %s (newest) and %s (oldest)", header[1], header[2], newest, oldest)
	}
	i := strings.Index(doc, "\nTested: ")
	if i < 0 {
		t.Fatal(`deploy.md has no "Tested:" line`)
	}
	tested := doc[i+1:]
	if j := strings.Index(tested, "\n\n"); j >= 0 {
		tested = tested[:j]
	}
	tested = strings.Join(strings.Fields(tested), " ")
	for _, want := range []string{"Kubernetes " + newest + ", the whole suite", "Kubernetes " + oldest + ", the oldest supported", "`test/e2e/oldest`"} {
		if !strings.Contains(tested, want) {
			t.Errorf("deploy.md's Tested line does not say %q: %s", want, tested)
		}
	}
}

// requireKubernetes is a go.mod's requirement of k8s.io/kubernetes, alone or in a block, as
// hack/build-tools.sh reads it.
var requireKubernetes = regexp.MustCompile(`(?m)^(?:require)?\s+k8s\.io/kubernetes (v\S+)`)

// pinned is the k8s.io/kubernetes version a tools module requires.
func pinned(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := requireKubernetes.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s requires no k8s.io/kubernetes", path)
	}
	return string(m[1])
}

// minor is "1.37" of "v1.37.2".
func minor(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}
