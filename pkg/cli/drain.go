package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// MaxReason is the longest spec.reason the API takes (the CRD's maxLength).
const MaxReason = 256

// Maintenances reads and creates NodeMaintenances (cluster-scoped) through the client of
// faultline's API group.
type Maintenances struct {
	REST rest.Interface
}

// Create creates nm; the server names it from its generateName.
func (m *Maintenances) Create(ctx context.Context, nm *v1alpha1.NodeMaintenance) (*v1alpha1.NodeMaintenance, error) {
	out := &v1alpha1.NodeMaintenance{}
	err := m.REST.Post().Resource(v1alpha1.ResourceNodeMaintenance).Body(nm).Do(ctx).Into(out)
	if apierrors.IsNotFound(err) {
		return nil, ErrMaintenanceAPINotInstalled
	}
	if err != nil {
		return nil, fmt.Errorf("create nodemaintenance: %w", err)
	}
	return out, nil
}

// List reads every NodeMaintenance.
func (m *Maintenances) List(ctx context.Context) ([]v1alpha1.NodeMaintenance, error) {
	list := &v1alpha1.NodeMaintenanceList{}
	if err := m.REST.Get().Resource(v1alpha1.ResourceNodeMaintenance).Do(ctx).Into(list); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, ErrMaintenanceAPINotInstalled
		}
		return nil, fmt.Errorf("list nodemaintenances: %w", err)
	}
	return list.Items, nil
}

// ErrMaintenanceAPINotInstalled: the cluster's faultline predates NodeMaintenance.
var ErrMaintenanceAPINotInstalled = fmt.Errorf("the NodeMaintenance API (faultline.dev/v1alpha1 nodemaintenances) is not installed in this cluster: " +
	"upgrade faultline with `launcher install`")

// Wait watches the NodeMaintenance name until done says so, and returns it. onChange, if
// set, sees every version before done does (e.g. to report a phase).
func (m *Maintenances) Wait(ctx context.Context, name string, done, onChange func(*v1alpha1.NodeMaintenance) bool) (*v1alpha1.NodeMaintenance, error) {
	lw := cache.NewListWatchFromClient(m.REST, v1alpha1.ResourceNodeMaintenance, "", fields.OneTermEqualSelector("metadata.name", name))
	var last *v1alpha1.NodeMaintenance
	_, err := watchtools.UntilWithSync(ctx, lw, &v1alpha1.NodeMaintenance{}, nil, func(e watch.Event) (bool, error) {
		nm, ok := e.Object.(*v1alpha1.NodeMaintenance)
		if !ok {
			return false, nil
		}
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("nodemaintenance %s was deleted", name)
		}
		last = nm
		if onChange != nil {
			onChange(nm)
		}
		return done(nm), nil
	})
	if err != nil {
		return last, fmt.Errorf("nodemaintenance %s: %w", name, err)
	}
	return last, nil
}

// Planned: the controller has written the plan (a dry run's, or a drain's before it cordons).
func Planned(nm *v1alpha1.NodeMaintenance) bool {
	return nm.Status.StartTime != nil && nm.Status.Phase != ""
}

// Settled: no worker is left on the nodes (Drained, or Completed once uncordoned), and
// every run moved runs again (or is gone), so that the interruption of each is known.
func Settled(nm *v1alpha1.NodeMaintenance) bool {
	if nm.Status.Phase != v1alpha1.MaintenanceDrained && nm.Status.Phase != v1alpha1.MaintenanceCompleted {
		return false
	}
	for _, r := range nm.Status.Runs {
		if r.Feasible && !r.Gone && r.RunningAt == nil {
			return false
		}
	}
	return true
}

// PrintPlan writes what a drain hits: per run, its attempt, the indexes on the nodes,
// whether the coordinator is among them, and whether it can move; the runs that cannot
// are called out under the table with the reason.
func PrintPlan(w io.Writer, nm *v1alpha1.NodeMaintenance) error {
	what := "drain"
	if nm.Spec.DryRun {
		what = "dry run"
	}
	fmt.Fprintf(w, "nodemaintenance/%s (%s of %s): %s\n", nm.Name, what, strings.Join(nm.Spec.Nodes, ", "), nm.Status.Phase)
	for _, n := range nm.Status.Nodes {
		if n.Missing {
			fmt.Fprintf(w, "warning: node %s does not exist\n", n.Name)
		}
	}
	if len(nm.Status.Runs) == 0 {
		fmt.Fprintln(w, "No training run has workers on these nodes.")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tRUN\tATTEMPT\tINDEXES\tCOORDINATOR\tNODES\tPLACEMENT")
	var blocked []string
	for _, r := range nm.Status.Runs {
		placement := "moves"
		if !r.Feasible {
			placement = "BLOCKED"
			blocked = append(blocked, fmt.Sprintf("  %s/%s: %s", r.Namespace, r.Name, orNone(r.Message)))
		}
		coord := "no"
		if r.Coordinator {
			coord = "yes (index 0)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Namespace, r.Name, r.Attempt, indexList(r.Indexes), coord, strings.Join(r.Nodes, ","), placement)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(blocked) > 0 {
		fmt.Fprintf(w, "%d run(s) have no feasible placement off these nodes and will NOT be moved (they stay until capacity frees or the node goes):\n", len(blocked))
		for _, b := range blocked {
			fmt.Fprintln(w, b)
		}
	}
	return nil
}

// PrintMoves writes, after a drain, what moved and how long each run was interrupted:
// from the end of the attempt on the nodes to every worker of the next one Running.
func PrintMoves(w io.Writer, nm *v1alpha1.NodeMaintenance) error {
	if nm.Status.DrainedTime != nil {
		fmt.Fprintf(w, "nodemaintenance/%s: %s at %s: no worker of a training run is left on %s\n", nm.Name, nm.Status.Phase, stamp(nm.Status.DrainedTime.Time), strings.Join(nm.Spec.Nodes, ", "))
	}
	if len(nm.Status.Runs) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tRUN\tFROM-ATTEMPT\tTO-ATTEMPT\tMOVED-AT\tINTERRUPTED\tOUTCOME")
	for _, r := range nm.Status.Runs {
		to, moved, interrupted := none, none, none
		if r.ToAttempt > 0 {
			to = strconv.Itoa(int(r.ToAttempt))
		}
		if r.MovedAt != nil {
			moved = stamp(r.MovedAt.Time)
			if r.RunningAt != nil {
				interrupted = interruption(r.RunningAt.Sub(r.MovedAt.Time))
			}
		}
		outcome := "moved"
		switch {
		case r.Gone:
			outcome = "gone (deleted or finished)"
		case !r.Feasible:
			outcome = "not moved: " + orNone(r.Message)
		case r.RunningAt == nil:
			outcome = "restarting"
		case r.Message != "":
			outcome = r.Message
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Namespace, r.Name, r.Attempt, to, moved, interrupted, outcome)
	}
	return tw.Flush()
}

// interruption is a span between two metav1.Times, which the API keeps to the second: a
// move faster than that reads "<1s", not a precise-looking "0ms".
func interruption(d time.Duration) string {
	if d < time.Second {
		return "<1s"
	}
	return span(d.Round(time.Second))
}

func indexList(idx []int32) string {
	if len(idx) == 0 {
		return none
	}
	s := make([]string, len(idx))
	for i, v := range idx {
		s[i] = strconv.Itoa(int(v))
	}
	return strings.Join(s, ",")
}

// DrainRequest is what `launcher drain` asks for.
type DrainRequest struct {
	Nodes  []string
	Reason string
	DryRun bool
	Labels map[string]string
}

// Validate names the flag at fault and the fix.
func (d DrainRequest) Validate() error {
	if len(d.Nodes) == 0 {
		return UsageError("drain needs the nodes to drain: launcher drain NODE... (`launcher nodes` lists them)")
	}
	seen := map[string]bool{}
	for _, n := range d.Nodes {
		if seen[n] {
			return UsageError("node %s is named twice: name each node once", n)
		}
		seen[n] = true
	}
	if len(d.Reason) > MaxReason {
		return UsageError("--reason is %d characters long; the runs' owners read it in events: keep it to %d", len(d.Reason), MaxReason)
	}
	return nil
}

// Object is the NodeMaintenance that carries the request.
func (d DrainRequest) Object() *v1alpha1.NodeMaintenance {
	nm := &v1alpha1.NodeMaintenance{Spec: v1alpha1.NodeMaintenanceSpec{Nodes: d.Nodes, Reason: d.Reason, DryRun: d.DryRun}}
	nm.GenerateName = "drain-"
	if d.DryRun {
		nm.GenerateName = "dry-run-"
	}
	nm.Labels = d.Labels
	return nm
}

// NodesExist refuses a drain of a node that is not there (a typo would otherwise give a
// maintenance that drains nothing), naming it and where to look.
func NodesExist(ctx context.Context, cl *Clients, names []string) error {
	for _, n := range names {
		_, err := cl.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return UsageError("node %q not found: `launcher nodes` lists the nodes", n)
		}
		if err != nil {
			return fmt.Errorf("get node %s: %w", n, err)
		}
	}
	return nil
}
