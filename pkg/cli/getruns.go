package cli

import (
	"context"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// GetRequest is what `get` was asked, with kubectl get's flags.
type GetRequest struct {
	Names []string
	// Selector is -l: a label selector of the runs to list.
	Selector      string
	AllNamespaces bool
	// Watch is -w: after the list, print each change until interrupted.
	Watch bool
	Print PrintOptions
}

// Get lists the runs (or reads those named) and prints them; with Watch it then prints each
// change of the same runs until ctx ends.
func Get(ctx context.Context, cl *Clients, req GetRequest, out, errOut io.Writer) error {
	switch {
	case req.Selector != "" && len(req.Names) > 0:
		return UsageError("name the runs or select them with -l, not both")
	case req.AllNamespaces && len(req.Names) > 0:
		return UsageError("--all-namespaces lists every run; it takes no names")
	case req.Watch && len(req.Names) > 1:
		return UsageError("-w follows one run, or a list: name at most one run (or select them with -l)")
	}
	if _, err := labels.Parse(req.Selector); err != nil {
		return UsageError("-l %q: %v", req.Selector, err)
	}
	req.Print.Single = len(req.Names) == 1
	req.Print.Watch = req.Watch
	req.Print.AllNamespaces = req.AllNamespaces
	printer, err := NewRunPrinter(req.Print)
	if err != nil {
		return err
	}
	runs := cl.Runs
	if req.AllNamespaces {
		runs = &Runs{REST: cl.Runs.REST} // no namespace: the whole cluster
	}
	opts := metav1.ListOptions{LabelSelector: req.Selector}
	var (
		list []v1alpha1.TrainingRun
		rv   string
	)
	if len(req.Names) == 0 {
		l, err := runs.ListWith(ctx, opts)
		if err != nil {
			return err
		}
		list, rv = l.Items, l.ResourceVersion
		if len(list) == 0 && printer.Tabular() && !req.Watch {
			switch {
			case req.AllNamespaces:
				fmt.Fprintln(errOut, "No trainingruns found.")
			default:
				fmt.Fprintf(errOut, "No trainingruns found in namespace %s.\n", runs.Namespace)
			}
			return nil
		}
	}
	for _, name := range req.Names {
		r, err := runs.Get(ctx, name)
		if err != nil {
			return err
		}
		list = append(list, *r)
		rv = r.ResourceVersion
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
	if err := printer.Print(out, list); err != nil || !req.Watch {
		return err
	}
	return runs.Watch(ctx, rv, opts, func(_ watch.EventType, run *v1alpha1.TrainingRun) error {
		return printer.PrintChange(out, run)
	})
}
