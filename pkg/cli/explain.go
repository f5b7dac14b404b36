package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// ExplainRun writes the verdict on a run's failure: the most recent one, or that of attempt
// (when not 0) from the history.
func ExplainRun(w io.Writer, run *v1alpha1.TrainingRun, attempt int32) error {
	p := &pw{w: w}
	st := &run.Status
	p.line(0, fmt.Sprintf("trainingrun %s in namespace %s: phase %s, attempt %d, %d/%d workers ready",
		run.Name, run.Namespace, orNone(string(st.Phase)), st.Attempt, readyWorkers(run), run.Spec.Workers))
	p.line(0, "restarts spent/allowed: "+budgets(run))
	for _, l := range wrap(queueExplain(run), 100) {
		p.line(0, l)
	}
	v, n := st.LastFailure, int32(0)
	if attempt != 0 {
		i := slices.IndexFunc(st.Attempts, func(r v1alpha1.AttemptRecord) bool { return r.Attempt == attempt })
		if i < 0 {
			return UsageError("trainingrun %s has no attempt %d in its history (attempts kept: %s)", run.Name, attempt, attemptNumbers(run))
		}
		v, n = st.Attempts[i].Verdict, attempt
		if v == nil {
			outcome := st.Attempts[i].Outcome
			if outcome == "" {
				outcome = "not ended yet"
			}
			if by := st.Attempts[i].Suspension; by != "" {
				outcome += " by " + by
			}
			p.line(0, "")
			p.line(0, fmt.Sprintf("attempt %d did not fail (%s): nothing to explain.", attempt, outcome))
			return p.err
		}
	} else if v != nil {
		n = attemptOf(run, v)
	}
	if v == nil {
		p.line(0, "")
		p.line(0, "no attempt of this run has failed: nothing to explain.")
		return p.err
	}
	p.line(0, "")
	head := "The last failure"
	if n > 0 {
		head = fmt.Sprintf("Attempt %d ended", n)
	}
	p.line(0, head+": "+verdictLine(v))
	p.line(0, "Decision: "+decisionLine(v))
	if how := restartedHow(run, n); how != "" {
		p.line(0, "Restart: "+how)
	}
	if i := slices.IndexFunc(st.Attempts, func(r v1alpha1.AttemptRecord) bool { return r.Attempt == n }); i >= 0 && st.Attempts[i].Checkpoint != nil {
		for j, l := range wrap("Checkpoint: "+checkpointExplain(run, st.Attempts[i].Checkpoint), 100) {
			p.line(min(j, 1)*2, l)
		}
	}
	p.line(0, "")
	for _, l := range wrap(v.Explanation, 100) {
		p.line(0, l)
	}
	writeEvidence(p, v.Evidence)
	p.line(0, "")
	for _, l := range wrap("What to do: "+advice(run, v, n), 100) {
		p.line(0, l)
	}
	return p.err
}

// restartedHow says how the attempt after attempt n started, "" when none did: in place (the
// healthy workers in their pods) or with every pod made again.
func restartedHow(run *v1alpha1.TrainingRun, n int32) string {
	i := slices.IndexFunc(run.Status.Attempts, func(r v1alpha1.AttemptRecord) bool { return r.Attempt == n+1 })
	if n == 0 || i < 0 {
		return ""
	}
	if rec := &run.Status.Attempts[i]; rec.RestartMode == v1alpha1.RestartModeInPlace {
		return fmt.Sprintf("attempt %d %s", n+1, inPlaceSummary(run, rec))
	}
	return fmt.Sprintf("attempt %d in a new Job, every pod made again", n+1)
}

// attemptOf finds the attempt whose verdict v is (the last failure's).
func attemptOf(run *v1alpha1.TrainingRun, v *v1alpha1.FailureVerdict) int32 {
	for i := len(run.Status.Attempts) - 1; i >= 0; i-- {
		r := &run.Status.Attempts[i]
		if r.Verdict != nil && r.Verdict.Pod == v.Pod && r.Verdict.Cause == v.Cause {
			return r.Attempt
		}
	}
	return 0
}

func attemptNumbers(run *v1alpha1.TrainingRun) string {
	var s []string
	for _, r := range run.Status.Attempts {
		s = append(s, strconv.Itoa(int(r.Attempt)))
	}
	if len(s) == 0 {
		return none
	}
	return strings.Join(s, ", ")
}

func writeEvidence(p *pw, evidence []string) {
	if len(evidence) == 0 {
		return
	}
	p.line(0, "")
	p.line(0, "Evidence:")
	for _, e := range evidence {
		p.line(1, "- "+e)
	}
}

// advice says what a person can do about a verdict.
func advice(run *v1alpha1.TrainingRun, v *v1alpha1.FailureVerdict, attempt int32) string {
	logs := fmt.Sprintf("`launcher logs %s", run.Name)
	if attempt > 0 {
		logs += fmt.Sprintf(" --attempt %d", attempt)
	}
	if v.Index != nil {
		logs += fmt.Sprintf(" --index %d", *v.Index)
	}
	logs += "`"
	var s string
	switch v.Cause {
	case v1alpha1.CauseNodeShutdown, v1alpha1.CauseNodeMaintenance:
		s = "nothing: the node was shut down or drained, which is not the program's fault; faultline restarts the gang within the infrastructure budget."
	case v1alpha1.CausePlannedMaintenance:
		s = "nothing: the node was drained or taken away as planned (a drain, a node-pool upgrade, a scale-down); the run moved without spending budget, and keeps off the node until it is uncordoned."
	case v1alpha1.CauseGPUFault:
		s = fmt.Sprintf("have the GPU on node %s reset or the node drained; the default rule keeps later attempts off that node.", orNone(v.Node))
	case v1alpha1.CausePreemption, v1alpha1.CauseEviction:
		s = "Kubernetes took the pods back (preemption or node pressure): give the run a higher priorityClass, or queue it with Kueue so that it is suspended rather than killed."
	case v1alpha1.CauseNodeLost:
		s = fmt.Sprintf("node %s went away or stopped reporting past its workers' toleration of an unreachable node (or its node agent went silent too): check it; later attempts run elsewhere if the node stays NotReady. A node that comes back within that toleration (a kubelet restart) costs no restart: shorten it (tolerations, node.kubernetes.io/unreachable) to restart sooner.", orNone(v.Node))
	case v1alpha1.CauseAppExit:
		s = "the program failed on its own: read its output with " + logs + ", fix it and submit the run again."
	case v1alpha1.CauseOOMKilled:
		s = "the worker ran out of memory: raise the container's memory limit or lower the per-worker batch size, then submit again."
	case v1alpha1.CauseLimitExceeded:
		s = "the worker exceeded a limit of its own pod (ephemeral storage: its logs, checkpoints or caches written to the container's disk, or an emptyDir's sizeLimit): write large files to a volume, or raise the limit; see " + logs + "."
	case v1alpha1.CauseAppGPUError:
		s = fmt.Sprintf("the program caused GPU error XID %d (e.g. an illegal memory access): a bug in the program or its kernels, not the hardware; see %s.", v.XID, logs)
	default:
		s = "there was no evidence either way: make sure the node agent runs on every node (`launcher install`), so that shutdowns and GPU faults are recorded on the pods before they fail; see " + logs + "."
	}
	if v.Action == v1alpha1.ActionFailRun && v.Class != v1alpha1.ClassApplication {
		s += fmt.Sprintf(" The run was failed although the application is not to blame: rule %s says FailRun or the %s restart budget is spent (%s); raise spec.failurePolicy.maxRestarts.%s to allow more restarts.",
			v.Rule, strings.ToLower(string(v.Class)), budgets(run), budgetField(v.Class))
	}
	return s
}

func budgetField(c v1alpha1.Class) string {
	switch c {
	case v1alpha1.ClassInfrastructure:
		return "infrastructure"
	case v1alpha1.ClassApplication:
		return "application"
	}
	return "unknown"
}

// PodVerdict is the live classification of the attempt a pod belongs to.
type PodVerdict struct {
	Pod     *corev1.Pod
	Run     string
	Attempt string
	// Pods are every pod of the attempt.
	Pods    []*corev1.Pod
	Verdict exitclass.Verdict
}

// ClassifyPod reads the pod, the other pods of its attempt and their nodes, and classifies
// the attempt as the controller would (without framework hints, which live in the
// controller's plugins).
func ClassifyPod(ctx context.Context, kube kubernetes.Interface, namespace, name string, now time.Time) (*PodVerdict, error) {
	pod, err := kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no trainingrun or pod named %s in namespace %s", name, namespace)
		}
		return nil, fmt.Errorf("get pod %s: %w", name, err)
	}
	run, attempt := pod.Labels[v1alpha1.LabelRun], pod.Labels[v1alpha1.LabelAttempt]
	if run == "" || attempt == "" {
		return nil, fmt.Errorf("pod %s is not a worker of a TrainingRun (it has no %s and %s labels)", name, v1alpha1.LabelRun, v1alpha1.LabelAttempt)
	}
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run, v1alpha1.LabelAttempt: attempt})
	list, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of attempt %s of %s: %w", attempt, run, err)
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	nodes := map[string]exitclass.NodeFacts{}
	for i := range list.Items {
		p := &list.Items[i]
		pods = append(pods, p)
		n := p.Spec.NodeName
		if n == "" {
			continue
		}
		if _, seen := nodes[n]; seen {
			continue
		}
		node, err := kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			nodes[n] = exitclass.NodeFacts{Gone: true}
		case err != nil:
			// Without read access to nodes the facts stay unknown, as for the controller.
		default:
			nodes[n] = exitclass.FactsOfNode(node, exitclass.DefaultNodeConditionRules)
		}
	}
	v := exitclass.Classify(exitclass.Observation{Pods: pods, Nodes: nodes, Now: now, SettleDeadline: now})
	return &PodVerdict{Pod: pod, Run: run, Attempt: attempt, Pods: pods, Verdict: v}, nil
}

// ExplainPod writes a pod's part in its attempt and the live verdict on the attempt.
func ExplainPod(w io.Writer, pv *PodVerdict) error {
	p := &pw{w: w}
	pod, v := pv.Pod, pv.Verdict
	idx := podIndex(pod)
	who := "pod " + pod.Name
	if idx >= 0 {
		who += fmt.Sprintf(" (index %d)", idx)
	}
	p.line(0, fmt.Sprintf("%s of trainingrun %s, attempt %s, on node %s: %s", who, pv.Run, pv.Attempt, orNone(pod.Spec.NodeName), podState(pod)))
	p.line(0, fmt.Sprintf("attempt %s: %s", pv.Attempt, phaseCounts(pv.Pods)))
	p.line(0, "")
	if v.RootPod == "" {
		p.line(0, "No pod of this attempt has failed: nothing to explain.")
		return p.err
	}
	p.line(0, fmt.Sprintf("Verdict on attempt %s: %s (%s)", pv.Attempt, v.Cause, strings.ToLower(string(v.Class))))
	for _, l := range wrap(v.Explain(), 100) {
		p.line(1, l)
	}
	p.line(0, "")
	switch i := slices.IndexFunc(v.Peers, func(f exitclass.PeerFailure) bool { return f.Pod == pod.Name }); {
	case v.RootPod == pod.Name:
		p.line(0, "This pod is the root cause: it failed first, or with the strongest evidence.")
	case i >= 0:
		peer := v.Peers[i]
		line := fmt.Sprintf("This pod is a peer: it failed (%s) because pod %s failed", peer.Reason, v.RootPod)
		if peer.OwnCause != "" && peer.OwnCause != v1alpha1.CausePeerFailure {
			line += fmt.Sprintf("; it also has evidence of its own (%s)", peer.OwnCause)
		}
		p.line(0, line+".")
	default:
		p.line(0, fmt.Sprintf("This pod has not failed; pod %s did.", v.RootPod))
	}
	writeEvidence(p, v.Evidence)
	p.line(0, "")
	for _, l := range wrap("Note: this verdict is computed now from the pods and their nodes; the controller's verdict (`launcher explain "+
		pv.Run+"`) also applies the framework plugin's hints.", 100) {
		p.line(0, l)
	}
	return p.err
}

// podIndex is the pod's completion index, or -1.
func podIndex(p *corev1.Pod) int {
	if i, ok := attempt.Index(p); ok {
		return i
	}
	return -1
}

// podState is "Failed, container worker exited 1" or "Running".
func podState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	if p.DeletionTimestamp != nil {
		s += " (being deleted)"
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			s += fmt.Sprintf(", container %s exited %d", cs.Name, t.ExitCode)
			if t.Reason != "" && t.Reason != "Error" && t.Reason != "Completed" {
				s += " (" + t.Reason + ")"
			}
		}
	}
	return s
}

// phaseCounts is "16 pods: 1 Failed, 15 Running".
func phaseCounts(pods []*corev1.Pod) string {
	counts := map[string]int{}
	for _, p := range pods {
		counts[string(p.Status.Phase)]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", counts[k], k)
	}
	noun := "pods"
	if len(pods) == 1 {
		noun = "pod"
	}
	return fmt.Sprintf("%d %s: %s", len(pods), noun, strings.Join(parts, ", "))
}

// checkpointExplain is a request to save as explain says it: describe's line, each worker's
// answer with its step, and what was lost where a worker did not answer.
func checkpointExplain(run *v1alpha1.TrainingRun, c *v1alpha1.CheckpointStatus) string {
	s := checkpointLine(run, c)
	var saved []string
	for _, a := range c.Acks {
		switch {
		case a.Step != nil:
			saved = append(saved, fmt.Sprintf("%d at step %d", a.Index, *a.Step))
		case a.ExitCode != nil:
			saved = append(saved, fmt.Sprintf("%d (exited %d)", a.Index, *a.ExitCode))
		default:
			saved = append(saved, fmt.Sprint(a.Index))
		}
	}
	if len(saved) > 0 {
		s += ". Saved: index " + strings.Join(saved, ", ")
	}
	if len(c.Missing) > 0 {
		s += fmt.Sprintf(". Indexes %v did not say they saved: what they did since their last checkpoint is lost, and the gang resumes from the oldest step any index holds", c.Missing)
	}
	return s + "."
}
