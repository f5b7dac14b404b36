package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/goodput"
)

// Format is an output format of `nodes` (-o).
type Format string

const (
	FormatTable Format = "table"
	FormatWide  Format = "wide"
	FormatJSON  Format = "json"
	FormatYAML  Format = "yaml"
	FormatName  Format = "name"
)

// Formats lists the -o values of `nodes`, for flag help and completion.
var Formats = []string{string(FormatTable), string(FormatWide), string(FormatJSON), string(FormatYAML), string(FormatName)}

// ParseFormat reads `nodes -o`; "" is the table.
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

// GetOutputs are the -o values of `get`, kubectl's: the table, wide, and what cli-runtime's
// printers take, plus custom columns.
var GetOutputs = []string{"table", "wide", "json", "yaml", "name", "jsonpath=TEMPLATE", "jsonpath-file=FILE",
	"jsonpath-as-json=TEMPLATE", "go-template=TEMPLATE", "go-template-file=FILE", "custom-columns=SPEC", "custom-columns-file=FILE"}

// none is what a table shows for a value that is not there (kubectl's convention).
const none = "<none>"

// PrintOptions shape how `get` prints runs, as kubectl get's flags do.
type PrintOptions struct {
	// Output is -o: "" or table, wide, json, yaml, name, jsonpath=…, jsonpath-file=…,
	// jsonpath-as-json=…, go-template=…, go-template-file=…, custom-columns=…,
	// custom-columns-file=….
	Output string
	Now    time.Time
	// Single means one run was asked for by name: json, yaml and the templates then get
	// the object itself rather than a list.
	Single bool
	// AllNamespaces adds a NAMESPACE column (get -A).
	AllNamespaces bool
	// NoHeaders leaves out the table's header.
	NoHeaders bool
	// SortBy is a JSONPath (".status.attempt" or "{.metadata.creationTimestamp}") the runs
	// are sorted by.
	SortBy string
	// ShowLabels adds a LABELS column; LabelColumns a column for each of these labels.
	ShowLabels   bool
	LabelColumns []string
	// Watch prints the objects one by one, never as a list, as `get -w` prints the list it
	// starts from and then each change.
	Watch bool
}

// RunPrinter prints runs as PrintOptions say; one printer prints a list and then, for
// `get -w`, each change, without the header again.
type RunPrinter struct {
	o PrintOptions
	// table prints metav1.Tables: the runs' own, or custom columns.
	table   printers.ResourcePrinter
	columns []column
	wide    bool
	// object prints the objects themselves (json, yaml, name, templates).
	object printers.ResourcePrinter
	// tw is the writer that a watch's rows share, so that their columns line up; twOut
	// what it writes to.
	tw    flushWriter
	twOut io.Writer
}

type flushWriter interface {
	io.Writer
	Flush() error
}

// column is one of -o custom-columns.
type column struct {
	header string
	path   *jsonpath.JSONPath
}

// NewRunPrinter checks the options and makes the printer.
func NewRunPrinter(o PrintOptions) (*RunPrinter, error) {
	p := &RunPrinter{o: o}
	format, arg, _ := strings.Cut(o.Output, "=")
	switch format {
	case "", "table", "wide":
		if arg != "" {
			return nil, UsageError("-o %s takes no argument", format)
		}
		p.wide = format == "wide"
	case "custom-columns", "custom-columns-file":
		spec := arg
		if format == "custom-columns-file" {
			b, err := os.ReadFile(arg)
			if err != nil {
				return nil, UsageError("-o custom-columns-file: %v", err)
			}
			spec = columnsFromFile(string(b))
		}
		cols, err := parseColumns(spec)
		if err != nil {
			return nil, err
		}
		p.columns = cols
	default:
		pf := genericclioptions.NewPrintFlags("").WithTypeSetter(clientScheme)
		pf.OutputFormat = &o.Output
		printer, err := pf.ToPrinter()
		if err != nil {
			if genericclioptions.IsNoCompatiblePrinterError(err) {
				return nil, UsageError("unknown output format %q: use one of %s", o.Output, strings.Join(GetOutputs, ", "))
			}
			return nil, UsageError("-o %s: %v", o.Output, err)
		}
		p.object = printer
	}
	if p.object == nil {
		p.table = printers.NewTablePrinter(printers.PrintOptions{
			NoHeaders:     o.NoHeaders,
			WithNamespace: o.AllNamespaces && p.columns == nil,
			Wide:          p.wide,
			ShowLabels:    o.ShowLabels,
			ColumnLabels:  o.LabelColumns,
		})
	}
	if o.SortBy != "" {
		if _, err := parsePath("--sort-by", o.SortBy); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Tabular reports whether the printer draws a table (the table, wide, custom columns), for
// which an empty list is said on standard error rather than printed.
func (p *RunPrinter) Tabular() bool { return p.object == nil }

// PrintRuns writes runs as o says.
func PrintRuns(w io.Writer, runs []v1alpha1.TrainingRun, o PrintOptions) error {
	p, err := NewRunPrinter(o)
	if err != nil {
		return err
	}
	return p.Print(w, runs)
}

// Print writes runs, sorted by --sort-by when given.
func (p *RunPrinter) Print(w io.Writer, runs []v1alpha1.TrainingRun) error {
	if p.o.SortBy != "" {
		var err error
		if runs, err = sortRuns(runs, p.o.SortBy); err != nil {
			return err
		}
	}
	if p.object != nil {
		var obj runtime.Object
		if p.o.Output == "name" || p.o.Watch {
			// cli-runtime's name printer takes objects one by one, as kubectl prints them.
			for i := range runs {
				if err := p.object.PrintObj(forOutput(&runs[i]), w); err != nil {
					return err
				}
			}
			return nil
		}
		if p.o.Single && len(runs) == 1 {
			obj = forOutput(&runs[0])
		} else {
			list := &v1alpha1.TrainingRunList{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingRunList"}, Items: []v1alpha1.TrainingRun{}}
			for i := range runs {
				list.Items = append(list.Items, *forOutput(&runs[i]))
			}
			obj = list
		}
		return p.object.PrintObj(obj, w)
	}
	table, err := p.tableOf(runs)
	if err != nil {
		return err
	}
	return p.printTable(w, table)
}

// PrintChange writes one run that changed, as `get -w` shows each change: a row of the same
// table (its header printed once, by the first Print or PrintChange), or the object.
func (p *RunPrinter) PrintChange(w io.Writer, run *v1alpha1.TrainingRun) error {
	if p.object != nil {
		return p.object.PrintObj(forOutput(run), w)
	}
	table, err := p.tableOf([]v1alpha1.TrainingRun{*run})
	if err != nil {
		return err
	}
	return p.printTable(w, table)
}

// printTable prints through one tab writer per output, which remembers its columns' widths,
// so that a watch's rows line up under the header.
func (p *RunPrinter) printTable(w io.Writer, table *metav1.Table) error {
	if p.tw == nil || p.twOut != w {
		p.tw, p.twOut = printers.GetNewTabWriter(w), w
	}
	if err := p.table.PrintObj(table, p.tw); err != nil {
		return err
	}
	return p.tw.Flush()
}

// tableOf is the runs as the table, or as the custom columns, each row's object the run.
func (p *RunPrinter) tableOf(runs []v1alpha1.TrainingRun) (*metav1.Table, error) {
	if p.columns != nil {
		return customTable(runs, p.columns)
	}
	return RunTable(runs, p.o.Now), nil
}

// RunTable is the runs as a metav1.Table: the columns of `get` (those of -o wide with
// priority 1), each row's object its run.
func RunTable(runs []v1alpha1.TrainingRun, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "metadata.name"},
		{Name: "Phase", Type: "string", Description: "status.phase"},
		{Name: "Attempt", Type: "integer", Description: "status.attempt: the current attempt, from 1"},
		{Name: "Restarts", Type: "string", Description: "status.restarts: the restarts spent, by class"},
		{Name: "Ready", Type: "string", Description: "ready workers of the current attempt / spec.workers"},
		{Name: "Last-Cause", Type: "string", Description: "status.lastFailure.cause"},
		{Name: "Age", Type: "string", Description: "since metadata.creationTimestamp"},
		{Name: "Goodput", Type: "string", Description: "status.goodput: the share of the run's wall time its gang trained, as of now"},
		{Name: "Framework", Type: "string", Priority: 1, Description: "spec.framework"},
		{Name: "Last-Pod", Type: "string", Priority: 1, Description: "status.lastFailure.pod"},
		{Name: "Last-Node", Type: "string", Priority: 1, Description: "status.lastFailure.node"},
		{Name: "Excluded-Nodes", Type: "string", Priority: 1, Description: "status.excludedNodes"},
		{Name: "Queue", Type: "string", Priority: 1, Description: "the Kueue LocalQueue (label " + v1alpha1.LabelQueueName + ")"},
		{Name: "Admission", Type: "string", Priority: 1, Description: "where Kueue's admission stands"},
	}}
	for i := range runs {
		r := &runs[i]
		st := &r.Status
		pod, node := none, none
		if lf := st.LastFailure; lf != nil {
			pod, node = orNone(lf.Pod), orNone(lf.Node)
		}
		excluded := none
		if len(st.ExcludedNodes) > 0 {
			excluded = strings.Join(st.ExcludedNodes, ",")
		}
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells: []any{
				r.Name,
				orNone(string(st.Phase)),
				int64(st.Attempt),
				restartsShort(st.Restarts),
				fmt.Sprintf("%d/%d", readyWorkers(r), r.Spec.Workers),
				lastCause(st.LastFailure),
				age(r.CreationTimestamp, now),
				goodputCell(r, now),
				orNone(r.Spec.Framework), pod, node, excluded, queueName(r), admissionShort(r),
			},
			Object: runtime.RawExtension{Object: r},
		})
	}
	return t
}

// parseColumns reads kubectl's custom-columns spec: HEADER:JSONPATH,HEADER:JSONPATH.
func parseColumns(spec string) ([]column, error) {
	if spec == "" {
		return nil, UsageError("-o custom-columns needs columns: custom-columns=NAME:.metadata.name,PHASE:.status.phase")
	}
	var cols []column
	for _, part := range strings.Split(spec, ",") {
		header, path, ok := strings.Cut(part, ":")
		if !ok || header == "" || path == "" {
			return nil, UsageError("-o custom-columns: %q is not HEADER:JSONPATH (e.g. PHASE:.status.phase)", part)
		}
		jp, err := parsePath("-o custom-columns "+header, path)
		if err != nil {
			return nil, err
		}
		cols = append(cols, column{header: header, path: jp})
	}
	return cols, nil
}

// columnsFromFile reads kubectl's custom-columns file: a line of headers and a line of
// JSONPaths, separated by spaces.
func columnsFromFile(text string) string {
	var lines [][]string
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines = append(lines, f)
		}
	}
	if len(lines) != 2 || len(lines[0]) != len(lines[1]) {
		return ""
	}
	var parts []string
	for i := range lines[0] {
		parts = append(parts, lines[0][i]+":"+lines[1][i])
	}
	return strings.Join(parts, ",")
}

// parsePath compiles a JSONPath as kubectl takes it: with or without the braces.
func parsePath(flag, path string) (*jsonpath.JSONPath, error) {
	if !strings.HasPrefix(path, "{") {
		if !strings.HasPrefix(path, ".") {
			path = "." + path
		}
		path = "{" + path + "}"
	}
	jp := jsonpath.New(flag).AllowMissingKeys(true)
	if err := jp.Parse(path); err != nil {
		return nil, UsageError("%s: %q is not a JSONPath: %v", flag, path, err)
	}
	return jp, nil
}

// customTable is the runs as custom columns, each cell its JSONPath's values joined by
// commas, <none> when there is none.
func customTable(runs []v1alpha1.TrainingRun, cols []column) (*metav1.Table, error) {
	t := &metav1.Table{}
	for _, c := range cols {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: c.header, Type: "string"})
	}
	for i := range runs {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(forOutput(&runs[i]))
		if err != nil {
			return nil, err
		}
		row := metav1.TableRow{Object: runtime.RawExtension{Object: &runs[i]}}
		for _, c := range cols {
			vals, err := c.path.FindResults(obj)
			if err != nil {
				return nil, UsageError("-o custom-columns %s: %v", c.header, err)
			}
			var parts []string
			for _, set := range vals {
				for _, v := range set {
					parts = append(parts, fmt.Sprint(v.Interface()))
				}
			}
			cell := none
			if len(parts) > 0 {
				cell = strings.Join(parts, ",")
			}
			row.Cells = append(row.Cells, cell)
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}

// sortRuns orders runs by the value at a JSONPath, as kubectl's --sort-by: numbers by
// value, everything else as text (RFC 3339 times sort as they should), runs without the
// field first. Runs with the same value keep their order.
func sortRuns(runs []v1alpha1.TrainingRun, path string) ([]v1alpha1.TrainingRun, error) {
	jp, err := parsePath("--sort-by", path)
	if err != nil {
		return nil, err
	}
	type keyed struct {
		run   v1alpha1.TrainingRun
		num   float64
		isNum bool
		text  string
		set   bool
	}
	ks := make([]keyed, len(runs))
	for i := range runs {
		ks[i].run = runs[i]
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(forOutput(&runs[i]))
		if err != nil {
			return nil, err
		}
		vals, err := jp.FindResults(obj)
		if err != nil {
			return nil, UsageError("--sort-by %s: %v", path, err)
		}
		if len(vals) == 0 || len(vals[0]) == 0 {
			continue
		}
		if len(vals) > 1 || len(vals[0]) > 1 {
			return nil, UsageError("--sort-by %s names more than one value of run %s: sort by a single field", path, runs[i].Name)
		}
		v := vals[0][0].Interface()
		ks[i].set = true
		switch n := v.(type) {
		case int64:
			ks[i].num, ks[i].isNum = float64(n), true
		case float64:
			ks[i].num, ks[i].isNum = n, true
		default:
			ks[i].text = fmt.Sprint(v)
			if f, err := strconv.ParseFloat(ks[i].text, 64); err == nil {
				ks[i].num, ks[i].isNum = f, true
			}
		}
	}
	sort.SliceStable(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		switch {
		case !a.set || !b.set:
			return !a.set && b.set
		case a.isNum && b.isNum:
			return a.num < b.num
		}
		return a.text < b.text
	})
	out := make([]v1alpha1.TrainingRun, len(ks))
	for i := range ks {
		out[i] = ks[i].run
	}
	return out, nil
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

// writeObject writes a value that is not an API object (nodes' reports, a manifest) as JSON
// or YAML, as the printers write objects.
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
	}{{c.Infrastructure, "infra"}, {c.Application, "app"}, {c.Unknown, "unknown"}, {c.NoProgress, "no progress"}} {
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

// goodputCell is the run's goodput as of now, <none> where its controller keeps no ledger.
func goodputCell(run *v1alpha1.TrainingRun, now time.Time) string {
	if run.Status.Goodput == nil {
		return none
	}
	return goodputShare(goodput.AsOf(run, now), run)
}
