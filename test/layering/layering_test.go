// Package layering checks the arrows between faultline's packages: what the CLI, the
// agent, the API and the pure decision packages may depend on.
package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/faultline-dev/faultline/"

// Each package and what it must never depend on, directly or not.
var forbidden = map[string][]string{
	// The CLI reads runs and explains them: the API, exitclass and its clients, never the
	// reconciler.
	"pkg/cli": {module + "pkg/controller", module + "pkg/nodeagent"},
	// The agent and the controller are apart: they meet only in the API.
	"pkg/nodeagent":  {module + "pkg/controller", module + "pkg/cli"},
	"pkg/controller": {module + "pkg/nodeagent", module + "pkg/cli"},
	// Pure decisions: no client, no process.
	"pkg/exitclass": {"k8s.io/client-go/", "sigs.k8s.io/controller-runtime", module + "pkg/controller"},
	"pkg/policy":    {"k8s.io/client-go/", "sigs.k8s.io/controller-runtime", module + "pkg/controller"},
	// A conversion is pure too: the decoded object in, the run out.
	"pkg/convert": {"k8s.io/client-go/", "sigs.k8s.io/controller-runtime", module + "pkg/controller", module + "pkg/cli", module + "pkg/framework"},
	// The test harness links into test binaries that Go links with immediate binding (those
	// that take in Go's plugin package), where go-nvml's NVML symbols, left unresolved until
	// the library is loaded, fail the binary at its start ("undefined symbol").
	"test/cluster": {"github.com/NVIDIA/go-nvml/"},
	// The API is types only: a client of it need not take client-go along.
	"api/v1alpha1": {"k8s.io/client-go/", "sigs.k8s.io/controller-runtime", module + "pkg/"},
}

func TestLayering(t *testing.T) {
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range bad {
				if dep == b || strings.HasPrefix(dep, b) && strings.HasSuffix(b, "/") || strings.HasPrefix(dep, b+"/") {
					t.Errorf("%s depends on %s: it must not (see the arrows in this test)", pkg, dep)
				}
			}
		}
	}
}

// The reconciler and the gates beside it (issue 57): pkg/controller holds the run's story
// and calls each gate through its interface; the gates hold what they are about and know
// nothing of the reconciler or of each other.
var (
	// reconcilerImportsNot are what pkg/controller must not import itself: Kueue's API is
	// the admission gate's, and so is every unstructured Workload.
	reconcilerImportsNot = []string{module + "pkg/kueue", "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"}
	// gates are the packages beside the reconciler.
	gates = []string{"pkg/controller/admission", "pkg/controller/plannedmove", "pkg/controller/inplace", "pkg/controller/episode", "pkg/controller/slim", "pkg/controller/spares", "pkg/controller/creations"}
)

func TestReconcilerSeams(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, module+"pkg/controller").Output()
	if err != nil {
		t.Fatalf("go list pkg/controller: %v", err)
	}
	for _, imp := range strings.Fields(string(out)) {
		for _, bad := range reconcilerImportsNot {
			if imp == bad {
				t.Errorf("pkg/controller imports %s: the reconciler asks the admission gate (pkg/controller/admission), never Kueue's API", imp)
			}
		}
	}
	for _, gate := range gates {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+gate).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", gate, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == module+"pkg/controller" {
				t.Errorf("%s depends on pkg/controller: nothing below the reconciler may", gate)
			}
			for _, other := range gates {
				if other != gate && dep == module+other {
					t.Errorf("%s depends on %s: the gates beside the reconciler are apart", gate, other)
				}
			}
		}
	}
}
