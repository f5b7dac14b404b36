// Package docs holds faultline's documentation; its tests keep the documentation true to the
// code: the TrainingRun reference to the CRD's schema, and every link to a file or heading
// that exists.
package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const (
	crdFile       = "../deploy/crd/faultline.dev_trainingruns.yaml"
	nmCRDFile     = "../deploy/crd/faultline.dev_nodemaintenances.yaml"
	referenceFile = "reference.md"
	// nmHeading starts the NodeMaintenance part of reference.md: its tables document
	// nmCRDFile, those above it crdFile (both have a spec and a status).
	nmHeading = "# NodeMaintenance reference"
)

// reference is one CRD and the part of reference.md that documents it.
type reference struct {
	crd  string
	text string
	// line is the line of reference.md where text starts, for the errors.
	line int
}

// references splits reference.md at nmHeading.
func references(t *testing.T) []reference {
	t.Helper()
	raw, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	i := strings.Index(text, "\n"+nmHeading+"\n")
	if i < 0 {
		t.Fatalf("%s has no %q section: the NodeMaintenance fields of %s are documented there", referenceFile, nmHeading, nmCRDFile)
	}
	return []reference{
		{crd: crdFile, text: text[:i+1]},
		{crd: nmCRDFile, text: text[i+1:], line: strings.Count(text[:i+1], "\n")},
	}
}

// opaque are fields of Kubernetes' own types, documented upstream: the reference describes
// them as a whole, not field by field.
var opaque = map[string]bool{
	"spec.template":                       true, // a PodTemplateSpec
	"spec.roles[].tolerations":            true, // []corev1.Toleration
	"spec.roles[].containers[].resources": true, // corev1.ResourceRequirements
	"status.conditions":                   true, // metav1.Condition
}

// schemaField is one field of the CRD's schema, by its path in the reference's notation
// (spec.failurePolicy.rules[].name).
type schemaField struct {
	props apiextensionsv1.JSONSchemaProps
	// parent: the field has fields of its own, which the reference documents one by one.
	parent bool
}

// crdFields reads every field under spec and status from the CRD's (only) version.
func crdFields(t *testing.T, crdFile string) map[string]schemaField {
	t.Helper()
	raw, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatalf("%s: %v", crdFile, err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%s has %d versions; the reference documents one", crdFile, len(crd.Spec.Versions))
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	fields := map[string]schemaField{}
	var walk func(path string, p apiextensionsv1.JSONSchemaProps)
	walk = func(path string, p apiextensionsv1.JSONSchemaProps) {
		children, sep := p.Properties, "."
		if p.Type == "array" && p.Items != nil && p.Items.Schema != nil {
			children, sep = p.Items.Schema.Properties, "[]."
		}
		fields[path] = schemaField{props: p, parent: len(children) > 0 && !opaque[path]}
		if opaque[path] {
			return
		}
		for name, c := range children {
			walk(path+sep+name, c)
		}
	}
	for _, top := range []string{"spec", "status"} {
		p, ok := root.Properties[top]
		if !ok {
			t.Fatalf("%s has no %s", crdFile, top)
		}
		walk(top, p)
	}
	return fields
}

// docRow is one row of a reference table, for one field.
type docRow struct {
	line int
	// defaultCell is the row's "default" column, "" in a table without one.
	defaultCell string
	hasDefault  bool
}

var backticked = regexp.MustCompile("`([^`]+)`")

// documentedFields reads the fields that reference.md documents: a heading names the
// object(s) its tables describe (`spec.failurePolicy`), and the first cell of a row names a
// field relative to each of them (`rules[].name`). Rows under any other heading are not
// fields.
func documentedFields(t *testing.T, text string, offset int) map[string]docRow {
	t.Helper()
	rows := map[string]docRow{}
	var objects []string
	defaultCol, inTable := -1, false
	for i, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "#"):
			objects = nil
			for _, m := range backticked.FindAllStringSubmatch(line, -1) {
				if m[1] == "spec" || m[1] == "status" || strings.HasPrefix(m[1], "spec.") || strings.HasPrefix(m[1], "status.") {
					objects = append(objects, m[1])
				}
			}
			inTable = false
		case !strings.HasPrefix(line, "|"):
			inTable = false
		case !inTable:
			// A table's header: remember where its default column is.
			inTable, defaultCol = true, slices.Index(cells(line), "default")
		case strings.HasPrefix(line, "| ---"):
		default:
			cs := cells(line)
			for _, m := range backticked.FindAllStringSubmatch(cs[0], -1) {
				for _, o := range objects {
					path := strings.TrimSuffix(o+"."+m[1], "[]")
					if prev, dup := rows[path]; dup {
						t.Errorf("%s:%d documents %s again (first on line %d)", referenceFile, offset+i+1, path, prev.line)
					}
					r := docRow{line: offset + i + 1}
					if defaultCol >= 0 && defaultCol < len(cs) {
						r.defaultCell, r.hasDefault = cs[defaultCol], true
					}
					rows[path] = r
				}
			}
		}
	}
	return rows
}

// cells splits a markdown table row; "\|" is a pipe inside a cell.
func cells(row string) []string {
	row = strings.Trim(strings.ReplaceAll(row, `\|`, "\x00"), "| ")
	var out []string
	for _, c := range strings.Split(row, "|") {
		out = append(out, strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|")))
	}
	return out
}

// TestReferenceCoversTheSchema: every field of the CRD's spec and status has a row in
// reference.md, and every row names a field that the CRD has, so that a field added,
// renamed or removed in api/v1alpha1 (and regenerated into deploy/crd) fails here until the
// reference says so too.
func TestReferenceCoversTheSchema(t *testing.T) {
	for _, ref := range references(t) {
		fields := crdFields(t, ref.crd)
		rows := documentedFields(t, ref.text, ref.line)
		var missing, unknown []string
		for path, f := range fields {
			if _, ok := rows[path]; !ok && !f.parent && path != "spec" && path != "status" {
				missing = append(missing, path)
			}
		}
		for path, r := range rows {
			if _, ok := fields[path]; !ok {
				unknown = append(unknown, fmt.Sprintf("%s (line %d)", path, r.line))
			}
		}
		sort.Strings(missing)
		sort.Strings(unknown)
		if len(missing) > 0 {
			t.Errorf("%s has no row for these fields of %s: add each to the table of its object (## `<object>`):\n  %s",
				referenceFile, ref.crd, strings.Join(missing, "\n  "))
		}
		if len(unknown) > 0 {
			t.Errorf("%s documents fields that %s does not have:\n  %s", referenceFile, ref.crd, strings.Join(unknown, "\n  "))
		}
	}
}

// TestReferenceDefaultsAndValuesMatchTheSchema: a default in a "default" column is the
// schema's default, and every value that the schema allows for a field (an enum) is named
// in the reference.
func TestReferenceDefaultsAndValuesMatchTheSchema(t *testing.T) {
	for _, ref := range references(t) {
		referenceDefaultsAndValues(t, ref)
	}
}

func referenceDefaultsAndValues(t *testing.T, ref reference) {
	fields := crdFields(t, ref.crd)
	rows := documentedFields(t, ref.text, ref.line)
	named := map[string]bool{}
	for _, m := range backticked.FindAllStringSubmatch(ref.text, -1) {
		named[m[1]] = true
	}
	paths := make([]string, 0, len(fields))
	for p := range fields {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, path := range paths {
		f := fields[path]
		if r, ok := rows[path]; ok && r.hasDefault && f.props.Default != nil {
			want := string(f.props.Default.Raw)
			var s string
			if json.Unmarshal(f.props.Default.Raw, &s) == nil {
				want = s
			}
			if !regexp.MustCompile(`(^|[^\w.])` + regexp.QuoteMeta(want) + `($|[^\w.])`).MatchString(r.defaultCell) {
				t.Errorf("%s:%d: the default of %s is %s in the schema, but the reference says %q", referenceFile, r.line, path, want, r.defaultCell)
			}
		}
		enum := f.props.Enum
		if f.props.Items != nil && f.props.Items.Schema != nil {
			enum = append(enum, f.props.Items.Schema.Enum...)
		}
		for _, e := range enum {
			var v string
			if err := json.Unmarshal(e.Raw, &v); err != nil {
				t.Fatalf("%s: enum value %s is not a string", path, e.Raw)
			}
			if !named[v] {
				t.Errorf("%s never names `%s`, a value of %s", referenceFile, v, path)
			}
		}
	}
}
