package cli

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// stamp renders an absolute time as every launcher printer does: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// stampAgo is "2026-01-02 15:04:05Z (5m ago)".
func stampAgo(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return none
	}
	return stamp(t.Time) + " (" + age(*t, now) + " ago)"
}

// span renders a duration for people: "850ms", "4.2s", "1m05s", "2h03m".
func span(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + span(-d)
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// eventTime is when an event last happened, whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func eventSource(e *corev1.Event) string {
	if e.ReportingController != "" {
		return e.ReportingController
	}
	return orNone(e.Source.Component)
}

// SortEvents orders events by time, oldest first.
func SortEvents(events []corev1.Event) {
	sort.SliceStable(events, func(i, j int) bool { return eventTime(&events[i]).Before(eventTime(&events[j])) })
}

// budgets is "infrastructure 1/10, application 0/0, unknown 0/1": spent of allowed; a run
// with a progress deadline adds its own budget, "no progress 0/1" (policy.Lines).
func budgets(run *v1alpha1.TrainingRun) string {
	b, r := run.Spec.FailurePolicy.MaxRestarts, run.Status.Restarts
	var parts []string
	for _, l := range policy.Lines(run) {
		parts = append(parts, fmt.Sprintf("%s %d/%d", lineWords[l], policy.LineSpent(r, l), policy.LineBudget(b, l)))
	}
	return strings.Join(parts, ", ")
}

// lineWords name the budget lines in the CLI's sentences.
var lineWords = map[policy.Line]string{
	policy.LineInfrastructure: "infrastructure",
	policy.LineApplication:    "application",
	policy.LineUnknown:        "unknown",
	policy.LineNoProgress:     "no progress",
}

// verdictLine is "NodeShutdown (infrastructure) at index 5 (pod llm-5-x) on node gpu-node-3, exit 143".
func verdictLine(v *v1alpha1.FailureVerdict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s)", v.Cause, strings.ToLower(string(v.Class)))
	if v.Index != nil {
		fmt.Fprintf(&b, " at index %d", *v.Index)
		if v.Pod != "" {
			fmt.Fprintf(&b, " (pod %s)", v.Pod)
		}
	} else if v.Pod != "" {
		fmt.Fprintf(&b, " in pod %s", v.Pod)
	}
	if v.Node != "" {
		fmt.Fprintf(&b, " on node %s", v.Node)
	}
	if v.ExitCode != nil {
		fmt.Fprintf(&b, ", exit %d", *v.ExitCode)
	}
	if v.XID != 0 {
		fmt.Fprintf(&b, ", XID %d", v.XID)
	}
	return b.String()
}

// decisionLine is "rule default-infrastructure → RestartRun".
func decisionLine(v *v1alpha1.FailureVerdict) string {
	rule := v.Rule
	if rule == "" {
		rule = "(none)"
	}
	if v.Action == "" {
		return "rule " + rule
	}
	return "rule " + rule + " → " + string(v.Action)
}

// gpusPerWorker adds up the GPU limits (else requests) of the template's containers.
func gpusPerWorker(spec *corev1.PodSpec) int64 {
	var n int64
	for _, c := range spec.Containers {
		q, ok := c.Resources.Limits[corev1.ResourceName(v1alpha1.ResourceGPU)]
		if !ok {
			q, ok = c.Resources.Requests[corev1.ResourceName(v1alpha1.ResourceGPU)]
		}
		if ok {
			n += q.Value()
		}
	}
	return n
}

// resourcesLine is "cpu 8, memory 64Gi, nvidia.com/gpu 2" from a container's requests and limits.
func resourcesLine(c *corev1.Container) string {
	names := map[corev1.ResourceName]resource.Quantity{}
	for n, q := range c.Resources.Requests {
		names[n] = q
	}
	for n, q := range c.Resources.Limits {
		names[n] = q
	}
	keys := make([]string, 0, len(names))
	for n := range names {
		keys = append(keys, string(n))
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		q := names[corev1.ResourceName(k)]
		parts = append(parts, k+" "+q.String())
	}
	if len(parts) == 0 {
		return none
	}
	return strings.Join(parts, ", ")
}

// ruleLine is "bad-gpu: GPUFault → RestartRun, excluding the node".
func ruleLine(r v1alpha1.FailurePolicyRule) string {
	var match []string
	for _, c := range r.OnCauses {
		match = append(match, string(c))
	}
	for _, c := range r.OnClasses {
		match = append(match, "class "+string(c))
	}
	if len(match) == 0 {
		match = []string{"any failure"}
	}
	s := r.Name + ": " + strings.Join(match, " or ") + " → " + string(r.Action)
	if r.ExcludeNode {
		s += ", excluding the node"
	}
	return s
}

func settleSeconds(run *v1alpha1.TrainingRun) int32 {
	return ptr.Deref(run.Spec.FailurePolicy.SettleSeconds, policy.DefaultSettleSeconds)
}

// truncate cuts s to n runes with an ellipsis.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// readyWorkers is the ready count to show: none for a run that has ended, whatever its
// status last counted.
func readyWorkers(run *v1alpha1.TrainingRun) int32 {
	switch run.Status.Phase {
	case v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseSuspended:
		return 0
	}
	return run.Status.ReadyWorkers
}
