package exitclass

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// A coordination service that loses a worker usually says which one, and tells every other
// worker before it ends them all in the same second (XLA's "Task 2 heartbeat timeout", "The
// following tasks are unhealthy (stopped sending heartbeats):\n2"): then neither the exit
// codes (every process aborted, 134) nor the order of exits tell the root, and the name
// does. A PeerFailure hint names the worker with the named groups below.
const (
	// HintGroupPeer is the named group of a PeerFailure hint's pattern that captures the
	// number of the worker the message names as the one that failed: its completion index,
	// or, with HintGroupRole, its index within that role.
	HintGroupPeer = "peer"
	// HintGroupRole is the named group that captures the role (TensorFlow's job name:
	// chief, worker, ps) a HintGroupPeer number counts in. A role the run does not lay out
	// (JAX's jax_worker, a MultiWorkerMirroredStrategy run's worker) numbers the
	// completion indexes themselves.
	HintGroupRole = "role"
)

// namedIndex is the completion index of the worker that msg, matched by the PeerFailure
// hint h, names as the one that failed, or attempt.NoIndex when it names none that pod's
// run has. The role layout is the pod's own (v1alpha1.AnnotationRoles, the same on every
// pod of a run).
func namedIndex(h *Hint, msg string, pod *corev1.Pod) int {
	pi := h.Pattern.SubexpIndex(HintGroupPeer)
	if pi < 0 {
		return attempt.NoIndex
	}
	m := h.Pattern.FindStringSubmatchIndex(msg)
	if m == nil || m[2*pi] < 0 {
		return attempt.NoIndex // the hint matched without naming anyone (an optional group)
	}
	n, err := strconv.Atoi(msg[m[2*pi]:m[2*pi+1]])
	if err != nil || n < 0 {
		return attempt.NoIndex
	}
	role := ""
	if ri := h.Pattern.SubexpIndex(HintGroupRole); ri >= 0 && m[2*ri] >= 0 {
		role = msg[m[2*ri]:m[2*ri+1]]
	}
	layout, ok := pod.Annotations[v1alpha1.AnnotationRoles]
	if role == "" || !ok {
		return n
	}
	first, last, found := roleSpan(layout, role)
	if !found || first+n > last {
		return attempt.NoIndex // a role or a number the run's layout does not have
	}
	return first + n
}

// roleSpan is the first and last completion index of role in a layout "name:first-last,...".
func roleSpan(layout, role string) (first, last int, ok bool) {
	for _, r := range strings.Split(layout, ",") {
		name, span, found := strings.Cut(r, ":")
		lo, hi, dash := strings.Cut(span, "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if found && dash && err1 == nil && err2 == nil && name == role {
			return a, b, true
		}
	}
	return 0, 0, false
}

// mention is one failed pod's message naming the worker that failed.
type mention struct {
	rec   int // the pod whose message it is: its position in the peer records
	index int // the completion index it names
	hint  *Hint
}

// naming is what the failed pods' messages say about which worker failed.
type naming struct {
	mentions []mention
	// agreed is the index every mention names, attempt.NoIndex when there is none or they
	// disagree; rec is the position of the failed pod with that index, -1 if none failed.
	agreed, rec int
}

// nameRoot reads the mentions: when they all name one index and that worker has failed, it
// becomes a root candidate second only to infrastructure evidence (meta is updated). A
// worker its peers name is the one that failed whatever its exit code and whenever its
// container ended: the coordination service aborts every process, the failed one too, in
// the same second. Infrastructure evidence still comes first: a node that died under a
// worker explains why the others lost it.
func nameRoot(mentions []mention, recs []PeerFailure, meta []failureMeta) naming {
	n := naming{mentions: mentions, agreed: attempt.NoIndex, rec: -1}
	if len(mentions) == 0 {
		return n
	}
	for _, m := range mentions[1:] {
		if m.index != mentions[0].index {
			return n
		}
	}
	n.agreed = mentions[0].index
	for i := range recs {
		if recs[i].Index == n.agreed {
			n.rec = i
			meta[i].tier = min(meta[i].tier, tierNamed)
			break
		}
	}
	return n
}

// namedBy is how many failed pods' messages name the root rec as the worker that failed.
func (n naming) namedBy(root int) int {
	if n.rec < 0 || n.rec != root {
		return 0
	}
	return len(n.mentions)
}

// awaited: the mentions agree on an index no failed pod has.
func (n naming) awaited() bool {
	return n.agreed != attempt.NoIndex && n.rec < 0
}

// evidence says what the mentions said and whether they counted.
func (n naming) evidence(recs []PeerFailure) []string {
	if len(n.mentions) == 0 {
		return nil
	}
	source := n.mentions[0].hint.Source
	if n.agreed == attempt.NoIndex {
		byIndex := map[int][]int{}
		var named []int
		for _, m := range n.mentions {
			if _, seen := byIndex[m.index]; !seen {
				named = append(named, m.index)
			}
			byIndex[m.index] = append(byIndex[m.index], m.rec)
		}
		slices.Sort(named)
		parts := make([]string, 0, len(named))
		for _, i := range named {
			parts = append(parts, "index "+strconv.Itoa(i)+" (by "+listWorkers(recs, byIndex[i])+")")
		}
		return []string{"the failed workers' output names different workers as the one that failed (" + source + " hints): " +
			strings.Join(parts, ", ") + "; not counted"}
	}
	by := make([]int, 0, len(n.mentions))
	for _, m := range n.mentions {
		by = append(by, m.rec)
	}
	line := "the output of " + listWorkers(recs, by) + " names "
	if n.rec < 0 {
		return []string{line + "index " + strconv.Itoa(n.agreed) + " as the worker that failed (" + source +
			" hint), but no pod with that index has failed; not counted"}
	}
	return []string{line + whoRec(&recs[n.rec]) + " as the worker that failed (" + source + " hint)"}
}

// maxNamers caps the workers an evidence line lists by index.
const maxNamers = 8

// listWorkers names the pods at positions pos of recs: "index 0, 1 and 3", by index.
func listWorkers(recs []PeerFailure, pos []int) string {
	ps := slices.Clone(pos)
	slices.SortFunc(ps, func(a, b int) int {
		if c := compareIndex(recs[a].Index, recs[b].Index); c != 0 {
			return c
		}
		return strings.Compare(recs[a].Pod, recs[b].Pod)
	})
	names := make([]string, 0, min(len(ps), maxNamers))
	for _, p := range ps[:min(len(ps), maxNamers)] {
		if recs[p].Index < 0 {
			names = append(names, "pod "+recs[p].Pod)
		} else {
			names = append(names, strconv.Itoa(recs[p].Index))
		}
	}
	var s string
	switch {
	case len(ps) > maxNamers:
		s = strings.Join(names, ", ") + " and " + strconv.Itoa(len(ps)-maxNamers) + " more"
	case len(names) == 1:
		s = names[0]
	default:
		s = strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	}
	if recs[ps[0]].Index >= 0 {
		s = "index " + s
	}
	return s
}

func whoRec(r *PeerFailure) string {
	if r.Index < 0 {
		return "pod " + r.Pod
	}
	return "index " + strconv.Itoa(r.Index) + " (pod " + r.Pod + ")"
}
