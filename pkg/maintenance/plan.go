package maintenance

import (
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// Hits groups the live workers of the current attempts of runs that sit on the drained
// nodes, one entry per run, sorted by namespace and name. runs maps "namespace/name" to the
// run (a worker of a run not in it, or of an older attempt, is not a hit: it is going
// anyway). Feasible is left false: see Feasible.
func Hits(pods []*corev1.Pod, runs map[string]*v1alpha1.TrainingRun, drained []string) []v1alpha1.MaintenanceRun {
	byRun := map[string]*v1alpha1.MaintenanceRun{}
	for _, p := range pods {
		if !slices.Contains(drained, p.Spec.NodeName) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		key := p.Namespace + "/" + p.Labels[v1alpha1.LabelRun]
		run := runs[key]
		if run == nil || !attempt.OfRun(p, run) {
			continue
		}
		if n, ok := attempt.Number(p); !ok || n != run.Status.Attempt {
			continue
		}
		h := byRun[key]
		if h == nil {
			h = &v1alpha1.MaintenanceRun{Namespace: run.Namespace, Name: run.Name, Attempt: run.Status.Attempt}
			byRun[key] = h
		}
		if i, ok := attempt.Index(p); ok {
			h.Indexes = append(h.Indexes, int32(i))
			h.Coordinator = h.Coordinator || i == 0
		}
		if !slices.Contains(h.Nodes, p.Spec.NodeName) {
			h.Nodes = append(h.Nodes, p.Spec.NodeName)
		}
	}
	out := make([]v1alpha1.MaintenanceRun, 0, len(byRun))
	for _, h := range byRun {
		slices.Sort(h.Indexes)
		slices.Sort(h.Nodes)
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Gang is what a run's next attempt needs from the nodes.
type Gang struct {
	Workers int32
	// PerWorker is one worker's requests (a limit stands for a missing request, as the API
	// server defaults extended resources such as GPUs).
	PerWorker corev1.ResourceList
	// Template is the worker pod's spec: its nodeSelector and tolerations.
	Template *corev1.PodSpec
	// Excluded are nodes the run keeps off besides the drained ones.
	Excluded []string
}

// GangOf reads a run's Gang.
func GangOf(run *v1alpha1.TrainingRun) Gang {
	per := corev1.ResourceList{}
	for _, c := range run.Spec.Template.Spec.Containers {
		for name, q := range c.Resources.Limits {
			if _, ok := c.Resources.Requests[name]; !ok {
				add(per, name, q)
			}
		}
		for name, q := range c.Resources.Requests {
			add(per, name, q)
		}
	}
	return Gang{
		Workers:   run.Spec.Workers,
		PerWorker: per,
		Template:  &run.Spec.Template.Spec,
		Excluded:  slices.Concat(run.Status.ExcludedNodes, run.Status.MaintenanceExcludedNodes),
	}
}

func add(l corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	cur := l[name]
	cur.Add(q)
	l[name] = cur
}

// Feasible reports whether the gang has a placement once the drained nodes are gone: every
// worker on a node that is schedulable, Ready, matches the template's nodeSelector, has each
// NoSchedule and NoExecute taint tolerated, and has the worker's requests free. used is what
// other pods request per node already (the run's own pods excluded: a planned restart stops
// them). It is a packing by count, not the scheduler: affinities and topology spread are not
// weighed, so a "yes" may still meet a Pending pod, and the run's status says so then. why
// explains a "no".
func Feasible(g Gang, nodes []*corev1.Node, used map[string]corev1.ResourceList, drained []string) (ok bool, why string) {
	fit, candidates := int64(0), 0
	for _, n := range nodes {
		if slices.Contains(drained, n.Name) || slices.Contains(g.Excluded, n.Name) || Cordoned(n) || !ready(n) || !matches(g.Template, n) {
			continue
		}
		candidates++
		fit += fits(g.PerWorker, n, used[n.Name])
		if fit >= int64(g.Workers) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("the gang needs %d workers of %s; off the drained nodes, %d eligible nodes hold only %d of them: "+
		"free capacity (or uncordon a node) before the drain, or accept that the run waits where it is until the node goes",
		g.Workers, describe(g.PerWorker), candidates, fit)
}

// fits is how many workers fit on node n beside what is used there.
func fits(per corev1.ResourceList, n *corev1.Node, used corev1.ResourceList) int64 {
	best := int64(-1)
	limit := func(k int64) {
		if best < 0 || k < best {
			best = k
		}
	}
	for name, q := range per {
		if q.IsZero() {
			continue
		}
		free := n.Status.Allocatable[name].DeepCopy()
		free.Sub(used[name])
		if free.Sign() <= 0 {
			return 0
		}
		limit(free.MilliValue() / q.MilliValue())
	}
	if pods, ok := n.Status.Allocatable[corev1.ResourcePods]; ok {
		u := used[corev1.ResourcePods]
		limit(pods.Value() - u.Value())
	}
	return max(best, 0)
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func matches(spec *corev1.PodSpec, n *corev1.Node) bool {
	if spec == nil {
		return true
	}
	if !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(n.Labels)) {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule || t.Key == corev1.TaintNodeUnschedulable {
			continue
		}
		if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tolerates(tol, t) }) {
			return false
		}
	}
	return true
}

func describe(l corev1.ResourceList) string {
	if len(l) == 0 {
		return "no requests"
	}
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, string(n))
	}
	slices.Sort(names)
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		q := l[corev1.ResourceName(n)]
		s += n + " " + q.String()
	}
	return s
}

// Used sums the requests of live pods per node, leaving out those skip reports.
func Used(pods []corev1.Pod, skip func(*corev1.Pod) bool) map[string]corev1.ResourceList {
	used := map[string]corev1.ResourceList{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || skip(p) {
			continue
		}
		l := used[p.Spec.NodeName]
		if l == nil {
			l = corev1.ResourceList{}
			used[p.Spec.NodeName] = l
		}
		for _, c := range p.Spec.Containers {
			for name, q := range c.Resources.Requests {
				add(l, name, q)
			}
			for name, q := range c.Resources.Limits {
				if _, ok := c.Resources.Requests[name]; !ok {
					add(l, name, q)
				}
			}
		}
		add(l, corev1.ResourcePods, *resource.NewQuantity(1, resource.DecimalSI))
	}
	return used
}

// tolerates is the API's toleration rule (v1.Toleration.ToleratesTaint, without its
// logger and feature gates): the key matches (or Exists with no key), the effect matches (or
// is empty), and for Equal the value.
func tolerates(tol corev1.Toleration, t corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return tol.Key != "" && tol.Value == t.Value
	}
	return false
}
