package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Document is one TrainingRun of a stream, and what is wrong with how it was written that its
// object cannot show: a key given twice in one mapping (the decoder keeps the last).
type Document struct {
	*unstructured.Unstructured
	Problems []string
}

// Documents reads the TrainingRuns of a YAML or JSON stream (several YAML documents may
// follow each other). Anything else in it is refused: submit creates runs only.
func Documents(r io.Reader, source string) ([]*Document, error) {
	reader := yaml.NewYAMLReader(bufio.NewReaderSize(r, 64<<10))
	var out []*Document
	for n := 1; ; n++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, UsageError("%s: document %d cannot be read: %v", source, n, err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return nil, UsageError("%s: document %d is not valid YAML or JSON: %v", source, n, err)
		}
		if len(doc) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: doc}
		gvk := u.GroupVersionKind()
		if gvk.Group != v1alpha1.GroupName || gvk.Kind != v1alpha1.KindTrainingRun {
			return nil, UsageError("%s: document %d is a %q of %q: submit takes TrainingRuns (apiVersion %s)",
				source, n, gvk.Kind, u.GetAPIVersion(), v1alpha1.GroupVersion)
		}
		if gvk.Version != v1alpha1.GroupVersion.Version {
			return nil, UsageError("%s: document %d has apiVersion %s: this launcher speaks %s", source, n, u.GetAPIVersion(), v1alpha1.GroupVersion)
		}
		if u.GetName() == "" && u.GetGenerateName() == "" {
			return nil, UsageError("%s: document %d has no metadata.name", source, n)
		}
		d := &Document{Unstructured: u}
		// What strict decoding refuses beyond the object's fields: keys given twice.
		if _, err := sigsyaml.YAMLToJSONStrict(raw); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if line = strings.TrimSpace(line); strings.HasPrefix(line, "line ") {
					d.Problems = append(d.Problems, fmt.Sprintf("%s: document %d: %s", source, n, line))
				}
			}
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, UsageError("%s holds no TrainingRun", source)
	}
	return out, nil
}

// Submit creates the runs as written (the API server validates them strictly) and prints a
// line for each. The namespace is the document's, else the command's; a document in
// another namespace than an explicit --namespace is refused, as kubectl does. With a dry
// run nothing is created: client checks each run here as the API server would (validate),
// server has the API server check it and store nothing; each line then says so.
func Submit(ctx context.Context, runs *Runs, docs []*Document, explicitNS bool, dry DryRun, out, errOut io.Writer) ([]*v1alpha1.TrainingRun, error) {
	var made []*v1alpha1.TrainingRun
	for _, d := range docs {
		u := d.Unstructured
		if len(d.Problems) > 0 && dry != DryRunClient {
			return made, UsageError("trainingrun %q is not valid:\n  %s", u.GetName(), strings.Join(d.Problems, "\n  "))
		}
		ns := u.GetNamespace()
		switch {
		case ns == "":
			u.SetNamespace(runs.Namespace)
			ns = runs.Namespace
		case explicitNS && ns != runs.Namespace:
			return made, UsageError("trainingrun %s is in namespace %s, which does not match --namespace %s", u.GetName(), ns, runs.Namespace)
		}
		body, err := json.Marshal(u.Object)
		if err != nil {
			return made, err
		}
		var run *v1alpha1.TrainingRun
		switch dry {
		case DryRunClient:
			if run, err = checkClient(body, d.Problems, errOut); err != nil {
				return made, err
			}
		case DryRunServer:
			r := &Runs{REST: runs.REST, Namespace: ns}
			if run, err = r.CreateDryRun(ctx, body); err != nil {
				return made, err
			}
		default:
			r := &Runs{REST: runs.REST, Namespace: ns}
			if run, err = r.Create(ctx, body); err != nil {
				return made, err
			}
		}
		fmt.Fprintln(out, created(run)+dryRunNote(dry))
		made = append(made, run)
	}
	return made, nil
}

// checkClient checks a run as written, offline, as the API server would (validate), with
// the problems of how it was written, and prints its warnings.
func checkClient(body []byte, problems []string, errOut io.Writer) (*v1alpha1.TrainingRun, error) {
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, err
	}
	// A run that does not decode (a value of the wrong type) is still checked field by
	// field: the schema names each.
	run := &v1alpha1.TrainingRun{}
	if err := json.Unmarshal(body, run); err != nil {
		run = nil
	}
	warnings, err := validate(run, obj, problems...)
	for _, w := range warnings {
		fmt.Fprintln(errOut, "warning: "+w)
	}
	return run, err
}

func dryRunNote(dry DryRun) string {
	switch dry {
	case DryRunClient:
		return " (dry run)"
	case DryRunServer:
		return " (server dry run)"
	}
	return ""
}

// Create submits one run built in Go (from `launcher run`'s flags). With a dry run it
// creates nothing and prints the run as YAML: client as built and checked here, server as
// the API server would store it, its defaults filled in.
func Create(ctx context.Context, runs *Runs, run *v1alpha1.TrainingRun, dry DryRun, out, errOut io.Writer) (*v1alpha1.TrainingRun, error) {
	if run.Namespace == "" {
		run.Namespace = runs.Namespace
	}
	warnings, err := ValidateRun(run)
	for _, w := range warnings {
		fmt.Fprintln(errOut, "warning: "+w)
	}
	if err != nil {
		return nil, err
	}
	if dry == DryRunClient {
		return run, YAML(out, run)
	}
	m, err := manifest(run)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	r := &Runs{REST: runs.REST, Namespace: run.Namespace}
	if dry == DryRunServer {
		got, err := r.CreateDryRun(ctx, body)
		if err != nil {
			return nil, err
		}
		stored := got.DeepCopy()
		stored.UID, stored.ResourceVersion, stored.Generation = "", "", 0
		return got, YAML(out, stored)
	}
	got, err := r.Create(ctx, body)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out, created(got))
	return got, nil
}

// YAML renders a run built in Go as a manifest (for `launcher run --dry-run`).
func YAML(w io.Writer, run *v1alpha1.TrainingRun) error {
	m, err := manifest(run)
	if err != nil {
		return err
	}
	return writeObject(w, m, FormatYAML)
}

// manifest is a run built in Go as the API server should receive it: without what a Go
// struct cannot leave out but the CRD must default. Backoff's fields are not pointers, so
// an unset backoff would arrive as zeros and override the defaults (5s, 300s, 600s).
func manifest(run *v1alpha1.TrainingRun) (map[string]any, error) {
	b, err := json.Marshal(forOutput(run))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	if run.Spec.FailurePolicy.Backoff == (v1alpha1.Backoff{}) {
		if fp, ok := m["spec"].(map[string]any)["failurePolicy"].(map[string]any); ok {
			delete(fp, "backoff")
		}
	}
	return m, nil
}
