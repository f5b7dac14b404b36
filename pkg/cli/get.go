package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Format is an output format of `get` (-o).
type Format string

const (
	FormatTable Format = "table"
	FormatWide  Format = "wide"
	FormatJSON  Format = "json"
	FormatYAML  Format = "yaml"
	FormatName  Format = "name"
)

// Formats lists the -o values, for flag help and completion.
var Formats = []string{string(FormatTable), string(FormatWide), string(FormatJSON), string(FormatYAML), string(FormatName)}

// ParseFormat reads -o; "" is the table.
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return FormatTable, nil
	}
	for _, f := range Formats {
		if s == f {
			return Format(s), nil
		}
	}
	return "", UsageError("unknown output format %q: use one of %s", s, strings.Join(Formats, ", "))
}

// none is what a table shows for a value that is not there (kubectl's convention).
const none = "<none>"

// PrintOptions shape PrintRuns' output.
type PrintOptions struct {
	Format Format
	Now    time.Time
	// Single means one run was asked for by name: json and yaml then print the object
	// itself rather than a list.
	Single bool
	// AllNamespaces adds a NAMESPACE column (get -A).
	AllNamespaces bool
}

// PrintRuns writes runs as o says.
func PrintRuns(w io.Writer, runs []v1alpha1.TrainingRun, o PrintOptions) error {
	f, now, single := o.Format, o.Now, o.Single
	switch f {
	case FormatJSON, FormatYAML:
		var obj any
		if single && len(runs) == 1 {
			obj = forOutput(&runs[0])
		} else {
			list := &v1alpha1.TrainingRunList{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingRunList"}}
			for i := range runs {
				list.Items = append(list.Items, *forOutput(&runs[i]))
			}
			if list.Items == nil {
				list.Items = []v1alpha1.TrainingRun{}
			}
			obj = list
		}
		return writeObject(w, obj, f)
	case FormatName:
		for _, r := range runs {
			if o.AllNamespaces {
				fmt.Fprintf(w, "%s/", r.Namespace)
			}
			fmt.Fprintf(w, "trainingrun.%s/%s\n", v1alpha1.GroupName, r.Name)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	header := []string{"NAME", "PHASE", "ATTEMPT", "RESTARTS", "READY", "LAST-CAUSE", "AGE"}
	if o.AllNamespaces {
		header = append([]string{"NAMESPACE"}, header...)
	}
	if f == FormatWide {
		header = append(header, "FRAMEWORK", "LAST-POD", "LAST-NODE", "EXCLUDED-NODES", "QUEUE", "ADMISSION")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for i := range runs {
		r := &runs[i]
		st := &r.Status
		row := []string{
			r.Name,
			orNone(string(st.Phase)),
			strconv.Itoa(int(st.Attempt)),
			restartsShort(st.Restarts),
			fmt.Sprintf("%d/%d", readyWorkers(r), r.Spec.Workers),
			lastCause(st.LastFailure),
			age(r.CreationTimestamp, now),
		}
		if o.AllNamespaces {
			row = append([]string{r.Namespace}, row...)
		}
		if f == FormatWide {
			pod, node := none, none
			if lf := st.LastFailure; lf != nil {
				pod, node = orNone(lf.Pod), orNone(lf.Node)
			}
			excluded := none
			if len(st.ExcludedNodes) > 0 {
				excluded = strings.Join(st.ExcludedNodes, ",")
			}
			row = append(row, orNone(r.Spec.Framework), pod, node, excluded, queueName(r), admissionShort(r))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// forOutput is the run as -o json/yaml show it: with its kind, without managed fields
// (kubectl hides them too).
func forOutput(run *v1alpha1.TrainingRun) *v1alpha1.TrainingRun {
	out := run.DeepCopy()
	out.APIVersion = v1alpha1.GroupVersion.String()
	out.Kind = v1alpha1.KindTrainingRun
	out.ManagedFields = nil
	return out
}

func writeObject(w io.Writer, obj any, f Format) error {
	if f == FormatYAML {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	b, err := json.MarshalIndent(obj, "", "    ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// restartsShort is "0", or the classes that spent restarts: "1 infra, 2 unknown".
func restartsShort(c v1alpha1.RestartCounts) string {
	var parts []string
	for _, p := range []struct {
		n    int32
		name string
	}{{c.Infrastructure, "infra"}, {c.Application, "app"}, {c.Unknown, "unknown"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.name))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

func lastCause(v *v1alpha1.FailureVerdict) string {
	if v == nil {
		return none
	}
	return string(v.Cause)
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

// age is kubectl's AGE: "5m", "3h2m", "<unknown>".
func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}
