package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// queueName is the Kueue queue the run names, or <none>.
func queueName(run *v1alpha1.TrainingRun) string {
	return orNone(run.Labels[v1alpha1.LabelQueueName])
}

// admissionShort says where Kueue stands with the run, for a table: the ClusterQueue that
// admitted it, or why it waits (Queued, Preempted, EvictedByKueue); <none> for a run in no queue.
func admissionShort(run *v1alpha1.TrainingRun) string {
	if run.Labels[v1alpha1.LabelQueueName] == "" {
		return none
	}
	c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionAdmitted)
	switch {
	case c == nil:
		return v1alpha1.ReasonQueued
	case c.Status == "True" && run.Status.Queue != nil:
		return run.Status.Queue.ClusterQueue
	}
	return c.Reason
}

// flavorsLine is resource=flavor, sorted by resource.
func flavorsLine(f map[string]string) string {
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(f)) {
		parts = append(parts, r+"="+f[r])
	}
	return strings.Join(parts, ", ")
}

// describeQueue writes the Queue section of a run that names a Kueue queue: its Workload,
// the admission (ClusterQueue, flavors, since when) or why it waits, and the evictions.
func describeQueue(p *pw, run *v1alpha1.TrainingRun, now time.Time) {
	if run.Labels[v1alpha1.LabelQueueName] == "" && run.Status.Queue == nil {
		return
	}
	p.line(0, "Queue (Kueue):")
	p.kv(1, "LocalQueue", queueName(run))
	q := run.Status.Queue
	if q == nil {
		p.kv(1, "Workload", "not created yet")
		return
	}
	p.kv(1, "Workload", orNone(q.Workload))
	if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionAdmitted); c != nil && c.Status == "True" {
		adm := "by ClusterQueue " + q.ClusterQueue
		if q.AdmittedAt != nil {
			adm += ", " + stampAgo(q.AdmittedAt, now)
		}
		p.kv(1, "Admitted", adm)
		if len(q.Flavors) > 0 {
			p.kv(1, "Flavors", flavorsLine(q.Flavors))
		}
	} else if c != nil {
		p.kv(1, "Admitted", fmt.Sprintf("no (%s): %s", c.Reason, c.Message))
	}
	ev := fmt.Sprint(q.Evictions)
	if e := q.LastEviction; e != nil {
		ev += fmt.Sprintf(", last %s: %s", stampAgo(&e.Time, now), e.Reason)
		if e.Preemptor != "" {
			ev += " by workload " + e.Preemptor
		}
		ev += ": " + e.Message
	}
	p.kv(1, "Evictions", ev+" (none spends a restart)")
}

// queueExplain says, for explain, where Kueue stands with a run that names a queue: admitted
// (by which ClusterQueue), waiting, or preempted and by what; "" for a run in no queue.
func queueExplain(run *v1alpha1.TrainingRun) string {
	if run.Labels[v1alpha1.LabelQueueName] == "" {
		return ""
	}
	s := "Kueue: queue " + queueName(run)
	c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionAdmitted)
	q := run.Status.Queue
	switch {
	case c == nil:
		s += ", not admitted yet"
	case c.Status == "True" && q != nil:
		s += ", admitted by ClusterQueue " + q.ClusterQueue
	case (c.Reason == v1alpha1.ReasonPreempted || c.Reason == v1alpha1.ReasonEvictedByKueue) && q != nil && q.LastEviction != nil:
		e := q.LastEviction
		by := ""
		if e.Preemptor != "" {
			by = " by workload " + e.Preemptor
		}
		s += fmt.Sprintf(", suspended until Kueue admits it again: evicted (%s)%s: %s", e.Reason, by, e.Message)
	default:
		s += ", waiting: " + c.Message
	}
	if q != nil && q.Evictions > 0 {
		s += fmt.Sprintf("; %d eviction(s) so far, none spent a restart", q.Evictions)
	}
	return s + "."
}
