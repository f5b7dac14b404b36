package exitclass

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// fuzzBytes hands out fuzz input; once it runs dry every choice is the first one.
type fuzzBytes struct{ b []byte }

func (r *fuzzBytes) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzBytes) bool() bool { return r.byte()&1 == 1 }

func pick[T any](r *fuzzBytes, options ...T) T { return options[int(r.byte())%len(options)] }

// timeOrZero is zero or a time within a minute of t0, at millisecond resolution.
func (r *fuzzBytes) timeOrZero() time.Time {
	if r.byte()%5 == 0 {
		return time.Time{}
	}
	return t0.Add(time.Duration(int(r.byte())<<4|int(r.byte()&0xf)) * 15 * time.Millisecond)
}

func (r *fuzzBytes) text(max int) string {
	n := int(r.byte()) % (max + 1)
	if n > len(r.b) {
		n = len(r.b)
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

var (
	fuzzNodes    = []string{"", "n0", "n1", "n2", "n3"}
	fuzzExits    = []int32{0, 1, 2, 137, 143, 139, 255, 130, -1, 9}
	fuzzReasons  = []string{"", "Error", "Completed", containerReasonOOMKilled, containerReasonStatusUnknown}
	fuzzMessages = []string{"", "coordination service heartbeat lost", "RESOURCE_EXHAUSTED: Out of memory",
		"NCCL NVLink error", "some error", "Segmentation fault"}
	fuzzStatusReasons = []string{"", statusReasonEvicted, statusReasonPreempting, statusReasonTerminated,
		statusReasonShutdown, statusReasonNodeShutdown, statusReasonNodeLost,
		statusReasonUnexpectedAdmissionError, statusReasonOutOfGPU, "DeadlineExceeded"}
	// The kubelet's eviction messages (pkg/kubelet/eviction/helpers.go), "" first so that
	// an input that ran dry keeps none.
	fuzzStatusMessages = []string{"", "", "",
		`Container c exceeded its local ephemeral storage limit "1Gi". `,
		`Pod ephemeral local storage usage exceeds the total limit of containers 2Gi. `,
		`Usage of EmptyDir volume "scratch" exceeds the limit "1Gi". `,
		"The node was low on resource: ephemeral-storage. ", "The node had condition: [DiskPressure]. "}
	fuzzDisruptions = []string{corev1.PodReasonTerminationByKubelet, corev1.PodReasonPreemptionByScheduler,
		reasonEvictionByEvictionAPI, reasonDeletionByTaintManager, reasonDeletionByPodGC, "Other"}
	fuzzXIDs         = []uint64{0, 13, 31, 45, 48, 63, 79, 94, 999}
	fuzzGPUReasons   = []string{"", "Xid79", "Xid", "DoubleBitECC", "Xid18446744073709551616"}
	fuzzHintPatterns = []HintPattern{
		{Pattern: `coordination service`, Cause: v1alpha1.CausePeerFailure, Source: "jax"},
		{Pattern: `Out of memory`, Cause: v1alpha1.CauseOOMKilled, Source: "jax"},
		{Pattern: `NVLink`, Cause: v1alpha1.CauseGPUFault, Source: "nccl"},
		{Pattern: `error`, Cause: v1alpha1.CauseAppExit, Source: "generic"},
	}
)

func fuzzCause(r *fuzzBytes) v1alpha1.Cause {
	if r.byte()%7 == 0 {
		return v1alpha1.Cause(pick(r, "", "Bogus", "gpufault"))
	}
	return pick(r, v1alpha1.AllCauses...)
}

// fuzzObservation builds an arbitrary attempt from fuzz input.
func fuzzObservation(data []byte) Observation {
	r := &fuzzBytes{b: data}
	obs := Observation{Nodes: map[string]NodeFacts{}}
	for _, n := range fuzzNodes[1:] {
		if !r.bool() {
			continue // facts unknown
		}
		facts := NodeFacts{Gone: r.bool(), NotReady: r.bool(), Unschedulable: r.bool(), GPUUnhealthyReason: pick(r, fuzzGPUReasons...)}
		if at := r.timeOrZero(); !at.IsZero() {
			facts.ShutdownDetectedAt = &at
		}
		obs.Nodes[n] = facts
	}
	for _, h := range fuzzHintPatterns {
		if r.bool() {
			hints, _ := CompileHints([]HintPattern{h})
			obs.Hints = append(obs.Hints, hints...)
		}
	}
	if r.bool() {
		slices.Reverse(obs.Hints)
	}
	obs.Now, obs.SettleDeadline = r.timeOrZero(), r.timeOrZero()

	nPods := 1 + int(r.byte())%8
	for i := range nPods {
		obs.Pods = append(obs.Pods, fuzzPod(r, i))
	}
	// Read last, so that the inputs of the corpus written before keep their meaning: an
	// unreachable node, the agent's heartbeat, the pods' creation and toleration.
	for _, n := range fuzzNodes[1:] {
		facts, ok := obs.Nodes[n]
		if !ok {
			continue
		}
		if facts.Unreachable = r.byte()%3 == 1; facts.Unreachable {
			if at := r.timeOrZero(); !at.IsZero() {
				facts.UnreachableSince = &at
			}
		}
		if r.bool() {
			facts.Agent = &Heartbeat{RenewedAt: t0.Add(time.Duration(r.byte()) * 250 * time.Millisecond), Duration: time.Duration(r.byte()%4) * 10 * time.Second}
		}
		obs.Nodes[n] = facts
	}
	for _, p := range obs.Pods {
		p.CreationTimestamp = metav1.NewTime(r.timeOrZero())
		switch r.byte() % 4 {
		case 1:
			p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(r.byte() % 90))}}
		case 2:
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}} // for ever
		case 3:
			p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
		}
	}
	// Read last too: a running worker's start, its grace period, fatal evidence on it, and
	// the node agent's NoProgress condition.
	for _, p := range obs.Pods {
		for i := range p.Status.ContainerStatuses {
			if run := p.Status.ContainerStatuses[i].State.Running; run != nil && r.bool() {
				run.StartedAt = metav1.NewTime(r.timeOrZero())
			}
		}
		if r.bool() {
			p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(r.byte() % 40))
		}
		if r.byte()%3 == 0 && p.Spec.NodeName != "" {
			// The agent's evidence, attested as it writes it: fatal or not, by the XID.
			fe := v1alpha1.FaultEvidence{Source: pick(r, "nvml-event", "logind"), Node: p.Spec.NodeName, Cause: pick(r, v1alpha1.CauseGPUFault, v1alpha1.CauseNodeShutdown, v1alpha1.CauseGPUFault)}
			at := r.timeOrZero()
			fe.DetectedAt = at.Format(time.RFC3339Nano)
			if fe.Cause == v1alpha1.CauseGPUFault {
				fe.GPU = &v1alpha1.GPUEvidence{Index: int(r.byte() % 8), XID: pick(r, fuzzXIDs...)}
			}
			raw, _ := json.Marshal(fe)
			p.Annotations[v1alpha1.AnnotationFaultEvidence] = string(raw)
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: v1alpha1.PodConditionInfrastructureFault,
				Status: corev1.ConditionTrue, Reason: string(fe.Cause), LastTransitionTime: metav1.NewTime(at)})
		}
		if r.byte()%3 == 0 {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: v1alpha1.PodConditionNoProgress,
				Status: pick(r, corev1.ConditionTrue, corev1.ConditionTrue, corev1.ConditionFalse), Reason: v1alpha1.ProgressSignalLog,
				Message: "no output", LastTransitionTime: metav1.NewTime(r.timeOrZero())})
		}
	}
	// Read last too: the kubelet's message beside the status reason, an eviction's for a
	// limit of the pod's own or for node pressure.
	for _, p := range obs.Pods {
		p.Status.Message = pick(r, fuzzStatusMessages...)
	}
	return obs
}

func fuzzPod(r *fuzzBytes, i int) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + strconv.Itoa(i), Annotations: map[string]string{}}}
	switch r.byte() % 4 {
	case 0:
		p.Annotations[batchv1.JobCompletionIndexAnnotation] = strconv.Itoa(i)
	case 1:
		p.Annotations[batchv1.JobCompletionIndexAnnotation] = pick(r, "0", "-3", "x", "")
	case 2:
		p.Labels = map[string]string{batchv1.JobCompletionIndexAnnotation: strconv.Itoa(int(r.byte() % 4))}
	}
	p.Spec.NodeName = pick(r, fuzzNodes...)
	p.Spec.Containers = []corev1.Container{{Name: "c"}}
	if r.bool() {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{v1alpha1.ResourceGPU: *resource.NewQuantity(8, resource.DecimalSI)}
	}
	p.Status.Phase = pick(r, corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown)
	p.Status.Reason = pick(r, fuzzStatusReasons...)
	for c := range int(r.byte() % 3) {
		cs := corev1.ContainerStatus{Name: "c" + strconv.Itoa(c)}
		switch r.byte() % 3 {
		case 0:
			cs.State.Running = &corev1.ContainerStateRunning{}
		case 1:
			cs.State.Terminated = &corev1.ContainerStateTerminated{
				ExitCode: pick(r, fuzzExits...), Reason: pick(r, fuzzReasons...),
				Message: pick(r, fuzzMessages...), FinishedAt: metav1.NewTime(r.timeOrZero()),
			}
		}
		if r.byte()%4 == 0 {
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: containerReasonStatusUnknown}
		}
		if r.bool() {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, cs)
		} else {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, cs)
		}
	}
	for range int(r.byte() % 3) {
		c := corev1.PodCondition{Status: pick(r, corev1.ConditionTrue, corev1.ConditionFalse), LastTransitionTime: metav1.NewTime(r.timeOrZero())}
		if r.bool() {
			c.Type, c.Reason = v1alpha1.PodConditionInfrastructureFault, string(fuzzCause(r))
		} else {
			c.Type, c.Reason = corev1.DisruptionTarget, pick(r, fuzzDisruptions...)
		}
		p.Status.Conditions = append(p.Status.Conditions, c)
	}
	switch r.byte() % 6 {
	case 1:
		fe := v1alpha1.FaultEvidence{Source: "nvml-event", Node: p.Spec.NodeName, Cause: fuzzCause(r)}
		if at := r.timeOrZero(); !at.IsZero() {
			fe.DetectedAt = at.Format(time.RFC3339Nano)
		}
		if r.bool() {
			fe.GPU = &v1alpha1.GPUEvidence{Index: int(r.byte() % 8), XID: pick(r, fuzzXIDs...)}
		}
		raw, _ := json.Marshal(fe)
		p.Annotations[v1alpha1.AnnotationFaultEvidence] = string(raw)
	case 2:
		p.Annotations[v1alpha1.AnnotationFaultEvidence] = pick(r, `{"cause":`, `null`, `{"gpu":{"xid":-1}}`, `{"detectedAt":"soon","cause":"GPUFault"}`, ``)
	case 3:
		p.Annotations[v1alpha1.AnnotationFaultEvidence] = r.text(40)
	}
	if r.byte()%3 == 0 {
		t := metav1.NewTime(r.timeOrZero())
		p.DeletionTimestamp = &t
	}
	return p
}

// The oracles below restate the package doc's definitions independently of the code.

func oracleFailed(p *corev1.Pod, nodes map[string]NodeFacts, now time.Time) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	if p.Status.Phase == corev1.PodSucceeded {
		return false
	}
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if t := cs.State.Terminated; t != nil && (t.ExitCode != 0 || t.Reason == containerReasonStatusUnknown) {
			return true
		}
		if cs.State.Terminated == nil && cs.LastTerminationState.Terminated != nil &&
			cs.LastTerminationState.Terminated.Reason == containerReasonStatusUnknown {
			return true
		}
	}
	if facts, known := nodes[p.Spec.NodeName]; p.Spec.NodeName != "" && known &&
		(facts.Gone || p.DeletionTimestamp != nil && facts.NotReady || oracleLostUnreachable(p, facts, now)) {
		return true
	}
	hung, at := oracleHung(p)
	return hung && !now.Before(at)
}

// oracleRunning: a container of the pod runs (not an init container); since is the earliest
// start of those that do, the pod's start or creation standing for an unknown one.
func oracleRunning(p *corev1.Pod) (since time.Time, running bool) {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			continue
		}
		t := cs.State.Running.StartedAt.Time
		if t.IsZero() {
			t = p.CreationTimestamp.Time
			if p.Status.StartTime != nil && !p.Status.StartTime.IsZero() {
				t = p.Status.StartTime.Time
			}
		}
		if !running || (!t.IsZero() && (since.IsZero() || t.Before(since))) {
			since = t
		}
		running = true
	}
	return since, running
}

// oracleHung: a running worker with fatal infrastructure evidence, attested (the last
// InfrastructureFault=True condition, the evidence of the same cause on the pod's node,
// recorded since the worker started): a fatal or XID-less GPU fault, failed at once; a node
// shutdown, failed once the pod's grace period (30 s by default) and 5 s are over.
func oracleHung(p *corev1.Pod) (bool, time.Time) {
	since, running := oracleRunning(p)
	if !running || p.Spec.NodeName == "" {
		return false, time.Time{}
	}
	reason := ""
	for _, c := range p.Status.Conditions {
		if c.Type == v1alpha1.PodConditionInfrastructureFault && c.Status == corev1.ConditionTrue {
			reason = c.Reason
		}
	}
	var fe v1alpha1.FaultEvidence
	raw, ok := p.Annotations[v1alpha1.AnnotationFaultEvidence]
	if reason == "" || !ok || json.Unmarshal([]byte(raw), &fe) != nil || fe.Node != p.Spec.NodeName || string(fe.Cause) != reason {
		return false, time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, fe.DetectedAt)
	if err != nil || at.IsZero() || at.Before(since.Add(-time.Second)) {
		return false, time.Time{}
	}
	switch fe.Cause {
	case v1alpha1.CauseGPUFault:
		fatal := map[uint64]bool{0: true, 48: true, 61: true, 62: true, 64: true, 74: true, 79: true, 95: true, 119: true, 120: true, 121: true, 140: true, 143: true, 154: true}
		return fe.GPU != nil && fatal[fe.GPU.XID], at
	case v1alpha1.CauseNodeShutdown:
		grace := int64(30)
		if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g >= 0 {
			grace = *g
		}
		return true, at.Add(time.Duration(grace)*time.Second + 5*time.Second) // and the kubelet's report of its kill
	}
	return false, time.Time{}
}

// oracleStalled: the attempt has pods, each not ended, with a running worker and, first among
// its NoProgress=True conditions, one whose time is not before the worker started (less a
// second).
func oracleStalled(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false
		}
		since, running := oracleRunning(p)
		if !running {
			return false
		}
		i := slices.IndexFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == v1alpha1.PodConditionNoProgress && c.Status == corev1.ConditionTrue
		})
		if i < 0 {
			return false
		}
		if t := p.Status.Conditions[i].LastTransitionTime.Time; t.IsZero() || t.Before(since.Add(-time.Second)) {
			return false
		}
	}
	return len(pods) > 0
}

// oracleLostUnreachable: the pod's node is unreachable, it ran there before that, and the
// node has stayed so for as long as the pod tolerates, or its agent's heartbeat expired.
func oracleLostUnreachable(p *corev1.Pod, facts NodeFacts, now time.Time) bool {
	if !facts.Unreachable {
		return false
	}
	since := facts.UnreachableSince
	if since != nil && p.CreationTimestamp.Time.After(*since) {
		return false
	}
	if a := facts.Agent; a != nil {
		expired := a.RenewedAt.Add(a.Duration)
		if !now.Before(expired) && (since == nil || !now.Before(*since)) {
			return true
		}
	}
	if since == nil {
		return false
	}
	tolerate, forever := time.Duration(0), false
	for _, t := range p.Spec.Tolerations {
		switch {
		case t.Key == corev1.TaintNodeUnreachable && t.TolerationSeconds != nil:
			tolerate = time.Duration(*t.TolerationSeconds) * time.Second
		case t.Key == "" && t.Operator == corev1.TolerationOpExists && t.Effect == "":
			forever = true
		}
	}
	return !forever && !now.Before(since.Add(tolerate))
}

// oracleAppEvidence: the pod carries explicit application evidence of some kind, as the
// package defines it beside claimable: OOMKilled, the kubelet's eviction for a limit of the
// pod's own, an application hint matching a termination message, or fault evidence naming a
// program XID or an application cause it may claim.
func oracleAppEvidence(p *corev1.Pod, hints []Hint) bool {
	isApp := func(c v1alpha1.Cause) bool {
		return c.Class() == v1alpha1.ClassApplication && claimable(c)
	}
	if evictedForOwnLimit(p) {
		return true
	}
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		t := cs.State.Terminated
		if t == nil {
			continue
		}
		if t.Reason == containerReasonOOMKilled {
			return true
		}
		for _, h := range hints {
			if isApp(h.Cause) && t.Message != "" && h.Pattern.MatchString(t.Message) {
				return true
			}
		}
	}
	var fe v1alpha1.FaultEvidence
	if raw, ok := p.Annotations[v1alpha1.AnnotationFaultEvidence]; ok && json.Unmarshal([]byte(raw), &fe) == nil {
		if fe.GPU != nil && fe.GPU.XID != 0 {
			return LookupXID(fe.GPU.XID).Cause == v1alpha1.CauseAppGPUError
		}
		return isApp(fe.Cause)
	}
	return false
}

func FuzzClassify(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("node shutdown under one worker, peers failing after it"))
	f.Add([]byte{0xff, 0x01, 0x03, 0x07, 0x0f, 0x1f, 0x3f, 0x7f, 0xff, 0x80, 0x40, 0x20, 0x10, 0x08, 0x04, 0x02, 0x01})
	f.Add([]byte{1, 1, 0, 0, 1, 2, 3, 1, 0, 1, 0, 1, 1, 5, 3, 1, 1, 4, 1, 2, 3, 4, 1, 1, 1, 1, 2, 0, 3, 1, 9, 9})
	f.Add([]byte(`{"cause":"GPUFault","gpu":{"xid":79}} {"cause": malformed`))
	f.Fuzz(func(t *testing.T, data []byte) {
		obs := fuzzObservation(data)
		v := Classify(obs)
		explanation := v.Explain()

		failed := map[string]*corev1.Pod{}
		for _, p := range obs.Pods {
			if oracleFailed(p, obs.Nodes, obs.Now) {
				failed[p.Name] = p
			}
		}
		if len(failed) == 0 {
			if oracleStalled(obs.Pods) {
				// A gang without progress: every worker silent, none failed.
				if v.Cause != v1alpha1.CauseNoProgress || v.Class != v1alpha1.ClassUnknown || v.Conclusive || !v.StillRunning ||
					v.RootPod == "" || len(v.Peers) != len(obs.Pods)-1 || slices.ContainsFunc(v.Peers, func(p PeerFailure) bool { return p.Pod == v.RootPod }) {
					t.Fatalf("a gang without progress, yet verdict %+v", v)
				}
				if v.Final != !obs.Now.Before(obs.SettleDeadline) || strings.Contains(explanation, "not final") == v.Final {
					t.Fatalf("NoProgress Final=%v at %v (deadline %v): %q", v.Final, obs.Now, obs.SettleDeadline, explanation)
				}
				return
			}
			if v.RootPod != "" || v.Class != v1alpha1.ClassUnknown || v.Cause != v1alpha1.CauseUnknown || v.Index != -1 || v.Final || len(v.Peers) != 0 {
				t.Fatalf("no failed pod, yet verdict %+v", v)
			}
			return
		}
		if v.Cause == v1alpha1.CauseNoProgress {
			t.Fatalf("NoProgress with failed pods %v", slices.Sorted(mapKeys(failed)))
		}
		root, ok := failed[v.RootPod]
		if !ok {
			t.Fatalf("root %q is not one of the failed pods %v", v.RootPod, slices.Sorted(mapKeys(failed)))
		}
		// A root that still runs has failed by its fatal evidence alone: infrastructure, and
		// the explanation says it ran on.
		if hung, _ := oracleHung(root); v.StillRunning && (!hung || v.Class != v1alpha1.ClassInfrastructure || !strings.Contains(explanation, "was still running")) {
			t.Fatalf("root %s StillRunning (hung by the oracle: %v), class %s: %q", root.Name, hung, v.Class, explanation)
		}
		if v.Cause == v1alpha1.CausePeerFailure || v.Class != v.Cause.Class() || v.Cause.Class() == "" {
			t.Fatalf("verdict class %q cause %q", v.Class, v.Cause)
		}

		// Peers: every other failed pod, once, sorted by index; never the root.
		seen := map[string]bool{}
		for i, p := range v.Peers {
			if p.Pod == v.RootPod {
				t.Fatalf("root %s is among its peers", p.Pod)
			}
			if _, ok := failed[p.Pod]; !ok || seen[p.Pod] {
				t.Fatalf("peer %s is not a failed pod, or listed twice", p.Pod)
			}
			seen[p.Pod] = true
			if i > 0 && compareIndex(v.Peers[i-1].Index, p.Index) > 0 {
				t.Fatalf("peers not sorted by index: %d before %d", v.Peers[i-1].Index, p.Index)
			}
			// Infrastructure evidence anywhere makes an infrastructure root.
			if p.OwnCause.Class() == v1alpha1.ClassInfrastructure && v.Class != v1alpha1.ClassInfrastructure {
				t.Fatalf("peer %s has infrastructure evidence (%s) but the root %s is %s", p.Pod, p.OwnCause, v.RootPod, v.Cause)
			}
		}
		// A pod that only blames a peer is the root only when every failure does.
		if strings.HasPrefix(v.Basis, "with a termination message that only blames a peer") {
			for _, p := range v.Peers {
				if p.OwnCause != v1alpha1.CausePeerFailure {
					t.Fatalf("peer-only root %s chosen over %s (%q)", v.RootPod, p.Pod, p.Reason)
				}
			}
		}
		if len(v.Peers) != len(failed)-1 {
			t.Fatalf("%d peers for %d failed pods", len(v.Peers), len(failed))
		}

		// Final, Conclusive and the settle deadline.
		beforeDeadline := obs.Now.Before(obs.SettleDeadline)
		if v.Final != (v.Conclusive || !beforeDeadline) {
			t.Fatalf("Final=%v Conclusive=%v beforeDeadline=%v", v.Final, v.Conclusive, beforeDeadline)
		}
		var wantWait time.Time
		if !v.Final {
			wantWait = obs.SettleDeadline
		}
		if !v.WaitUntil.Equal(wantWait) {
			t.Fatalf("Final=%v WaitUntil=%v, want %v", v.Final, v.WaitUntil, wantWait)
		}
		switch v.Class {
		case v1alpha1.ClassUnknown:
			if v.Conclusive {
				t.Fatalf("an Unknown verdict is conclusive")
			}
		case v1alpha1.ClassInfrastructure:
			if !v.Conclusive {
				t.Fatalf("an infrastructure verdict is not conclusive")
			}
		case v1alpha1.ClassApplication:
			if v.Final && beforeDeadline && !oracleAppEvidence(root, obs.Hints) {
				t.Fatalf("final application verdict %s before the deadline without application evidence on %s", v.Cause, root.Name)
			}
		}
		if strings.Contains(explanation, "not final") == v.Final {
			t.Fatalf("Explain() %q disagrees with Final=%v", explanation, v.Final)
		}
	})
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
