package examples

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// TestExamples: every example decodes strictly into one TrainingRun with its own name, no
// namespace (the user's is taken), a shipped framework, one per framework and layout the
// README promises; and each program in it is valid Python (when python3 is installed).
func TestExamples(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	layouts := map[string]bool{}
	for _, ex := range all {
		r := ex.Run
		if prev, dup := names[r.Name]; dup {
			t.Errorf("%s and %s both name their run %s: applied together, one would replace the other", prev, ex.File, r.Name)
		}
		names[r.Name] = ex.File
		if r.Namespace != "" {
			t.Errorf("%s sets metadata.namespace %q: leave it out, so that the user's namespace (-n) applies", ex.File, r.Namespace)
		}
		if !slices.Contains(framework.Shipped, r.Spec.Framework) {
			t.Errorf("%s: framework %q is not a shipped plugin (%v)", ex.File, r.Spec.Framework, framework.Shipped)
		}
		layout := r.Spec.Framework
		if s := r.Spec.FrameworkOptions["strategy"]; s != "" {
			layout += "/" + s
		}
		if ex.Queue() != "" {
			layout += "+kueue"
		}
		if r.Spec.FailurePolicy.RestartMode == v1alpha1.RestartModeRecreate {
			layout += "+recreate"
		}
		layouts[layout] = true
		for _, c := range r.Spec.Template.Spec.Containers {
			if src := program(c.Command, c.Args); src != "" {
				checkPython(t, ex.File, src)
			} else {
				t.Errorf("%s: container %s runs no program of its own (command %q, args %d)", ex.File, c.Name, c.Command, len(c.Args))
			}
		}
	}
	for _, want := range []string{"jax", "pytorch", "tensorflow", "tensorflow/parameter-server", "pytorch+kueue", "jax+recreate"} {
		if !layouts[want] {
			t.Errorf("no example of %s (have %v)", want, layouts)
		}
	}
}

// heredoc is the program a bash command writes to a file before running it (torchrun needs one).
var heredoc = regexp.MustCompile(`(?s)<<'PY'\n(.*?)\nPY\n`)

// program is the Python source of a container: `python3 -c SRC` or a bash heredoc.
func program(command, args []string) string {
	all := append(slices.Clone(command), args...)
	if len(all) == 0 {
		return ""
	}
	switch {
	case strings.HasPrefix(all[0], "python"):
		if i := slices.Index(all, "-c"); i >= 0 && i+1 < len(all) {
			return all[i+1]
		}
	case all[0] == "bash":
		if m := heredoc.FindStringSubmatch(all[len(all)-1]); m != nil {
			return m[1]
		}
	}
	return ""
}

func checkPython(t *testing.T, file, src string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Logf("%s: python3 not installed, the program's syntax is not checked", file)
		return
	}
	cmd := exec.Command(py, "-c", "import ast, sys; ast.parse(sys.stdin.read())")
	cmd.Stdin = strings.NewReader(src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: the program is not valid Python: %v\n%s", file, err, out)
	}
}
