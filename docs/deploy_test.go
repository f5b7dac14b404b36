package docs

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/faultline-dev/faultline/pkg/cli"
)

// versionsRow is a row of deploy.md's table of supported versions:
// | `group/version` | Kind | 1.30 | ... |
var versionsRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\| ([A-Za-z]+)[^|]*\\| ([0-9.]+) \\|")

// TestSupportedVersionsTable: deploy.md's table of supported versions lists every kind of
// object that `launcher install` applies (every component), with the Kubernetes version the
// launcher's preflight checks for it (cli.APINeeds), and Job's spec.managedBy with
// cli.JobManagedBySince.
func TestSupportedVersionsTable(t *testing.T) {
	b, err := os.ReadFile("deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Supported versions")
	if start < 0 {
		t.Fatal(`deploy.md has no "## Supported versions" section`)
	}
	section := doc[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	rows := map[string]string{} // "group/version Kind" → version
	for _, m := range versionsRow.FindAllStringSubmatch(section, -1) {
		rows[m[1]+" "+m[2]] = m[3]
	}
	objs, err := cli.Manifests(cli.InstallOptions{Components: slices.Concat(cli.InstallComponents, cli.OptionalComponents)})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		key := gvk.GroupVersion().String() + " " + gvk.Kind
		if seen[key] {
			continue
		}
		seen[key] = true
		need, ok := cli.APINeeds[gvk]
		if !ok {
			t.Errorf("the preflight knows nothing of %s (cli.APINeeds)", key)
			continue
		}
		switch got, ok := rows[key]; {
		case !ok:
			t.Errorf("deploy.md's table of supported versions lacks %s (Kubernetes %s)", key, need.Since)
		case got != need.Since:
			t.Errorf("deploy.md says %s needs Kubernetes %s; the preflight checks %s", key, got, need.Since)
		}
	}
	if got := rows["batch/v1 Job"]; got != cli.JobManagedBySince {
		t.Errorf("deploy.md says Job spec.managedBy needs Kubernetes %q; the preflight says %s", got, cli.JobManagedBySince)
	}
}
