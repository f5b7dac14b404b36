package trust

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/controller"
	"github.com/faultline-dev/faultline/test/cluster"
)

// requireForbidden fails the test unless err is a 403 whose message says every one of want.
func requireForbidden(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: got %v, want 403 Forbidden", what, err)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: the refusal %q does not say %q", what, err.Error(), w)
		}
	}
}

func evidencePatch(t *testing.T, ev v1alpha1.FaultEvidence) []byte {
	t.Helper()
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationFaultEvidence: string(raw)}}})
	if err != nil {
		t.Fatal(err)
	}
	return patch
}

// conditionPatch sets the InfrastructureFault condition (a strategic merge patch on status).
func conditionPatch(cause v1alpha1.Cause) []byte {
	return []byte(fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","reason":%q,"message":"forged"}]}}`,
		v1alpha1.PodConditionInfrastructureFault, cause))
}

// TestE2ETenantCannotForgeEvidence: a ServiceAccount with nothing but the built-in edit role
// in its namespace runs training there (the aggregated TrainingRun role), but cannot buy a
// restart: its forged evidence is refused with a message that names the key and who may
// write it (even the cluster admin is refused), the condition is out of its reach, and
// when its worker exits 1 the run fails fast as AppExit.
func TestE2ETenantCannotForgeEvidence(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	tr := runAsTenant(ctx, t, c, ns, "forged")
	asTenant, tenantUser, asAdmin, run, victim := tr.client, tr.user, tr.admin, tr.run, tr.victim

	forged := evidencePatch(t, v1alpha1.FaultEvidence{
		Source: v1alpha1.EvidenceSourceNVMLEvent, Node: victim.Spec.NodeName, Cause: v1alpha1.CauseGPUFault,
		DetectedAt: time.Now().UTC().Format(time.RFC3339Nano), GPU: &v1alpha1.GPUEvidence{UUID: "GPU-forged", XID: 79},
	})
	// `kubectl annotate pod` with the edit role: admission refuses it, and says why.
	err := asTenant.Patch(ctx, victim.DeepCopy(), client.RawPatch(types.MergePatchType, forged))
	requireForbidden(t, "tenant annotating its worker with fault evidence", err,
		v1alpha1.AnnotationFaultEvidence, "faultline node agent", tenantUser, "may not add, change or remove it")
	// The condition lives in the pod's status, which the edit role cannot write at all.
	err = asTenant.Status().Patch(ctx, victim.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, conditionPatch(v1alpha1.CauseGPUFault)))
	requireForbidden(t, "tenant writing the InfrastructureFault condition", err, `cannot patch resource "pods/status"`)
	// Nor may the cluster admin: only the agent of the pod's node and the controller.
	_, err = c.Client.CoreV1().Pods(ns).Patch(ctx, victim.Name, types.StrategicMergePatchType, conditionPatch(v1alpha1.CauseGPUFault), metav1.PatchOptions{}, "status")
	requireForbidden(t, "the admin writing the InfrastructureFault condition", err, v1alpha1.PodConditionInfrastructureFault, "faultline node agent")
	_, err = c.Client.CoreV1().Pods(ns).Patch(ctx, victim.Name, types.MergePatchType, forged, metav1.PatchOptions{})
	requireForbidden(t, "the admin annotating a worker with fault evidence", err, v1alpha1.AnnotationFaultEvidence)
	// Nor a worker's exit, which the controller judges an in-place pod by.
	exit := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"{\"attempt\":1,\"container\":\"worker\",\"exitCode\":143,\"node\":\"%s\"}"}}}`,
		v1alpha1.AnnotationWorkerExit, victim.Spec.NodeName))
	err = asTenant.Patch(ctx, victim.DeepCopy(), client.RawPatch(types.MergePatchType, exit))
	requireForbidden(t, "tenant reporting its worker's exit", err, v1alpha1.AnnotationWorkerExit, "faultline node agent", tenantUser, "may not add, change or remove it")
	_, err = c.Client.CoreV1().Pods(ns).Patch(ctx, victim.Name, types.MergePatchType, exit, metav1.PatchOptions{})
	requireForbidden(t, "the admin reporting a worker's exit", err, v1alpha1.AnnotationWorkerExit)
	// Nor the record of a barrier's open: a record of a later attempt would count an old
	// worker as stopped.
	record := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"{\"containerID\":\"forged\",\"restart\":0,\"attempt\":9}"}}}`,
		v1alpha1.AnnotationBarrierRecord))
	err = asTenant.Patch(ctx, victim.DeepCopy(), client.RawPatch(types.MergePatchType, record))
	requireForbidden(t, "tenant recording a barrier's open", err, v1alpha1.AnnotationBarrierRecord, "faultline node agent", tenantUser, "may not add, change or remove it")
	_, err = c.Client.CoreV1().Pods(ns).Patch(ctx, victim.Name, types.MergePatchType, record, metav1.PatchOptions{})
	requireForbidden(t, "the admin recording a barrier's open", err, v1alpha1.AnnotationBarrierRecord)

	// The worker's bug: the run fails fast, as the application's fault, with no restart.
	if err := c.FailPod(ctx, ns, victim.Name, cluster.Failure{ExitCode: 1, Reason: "Error", Message: "ValueError: loss is NaN"}); err != nil {
		t.Fatal(err)
	}
	failed := waitRun(ctx, t, asAdmin, ns, run.Name, "Failed", func(r *v1alpha1.TrainingRun) bool { return r.Status.Phase == v1alpha1.PhaseFailed })
	if lf := failed.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CauseAppExit {
		t.Errorf("run failed as %s, want AppExit", describe(failed))
	}
	if failed.Status.Attempt != 1 || failed.Status.Restarts != (v1alpha1.RestartCounts{}) {
		t.Errorf("attempt %d, restarts %+v: want attempt 1 and no restart spent", failed.Status.Attempt, failed.Status.Restarts)
	}
	got, err := c.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got.Annotations[v1alpha1.AnnotationFaultEvidence]; ok {
		t.Errorf("the worker carries evidence after every forgery was refused: %s", v)
	}
}

// TestE2EAgentWritesOnlyItsFields: the node agent's token (bound to its DaemonSet pod) may
// write its marks on the pods of its node and on its Node, and nothing else there: not a
// label, finalizer, phase, container status, foreign condition or annotation of a pod, nor
// its Node's labels, cordon, foreign taints, capacity or kubelet conditions.
func TestE2EAgentWritesOnlyItsFields(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	node := cluster.NodeName(1)
	_, token, err := c.PodBoundKubeconfig(ctx, dsPods[node], t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	asAgent, err := kubernetes.NewForConfig(token)
	if err != nil {
		t.Fatal(err)
	}
	const keep = "test.faultline.dev/keep"
	pod := createPod(ctx, t, c, ns, "worker", node, map[string]string{v1alpha1.LabelRun: "r", v1alpha1.LabelAttempt: "1"}, keep)
	dropFinalizers(t, c, pod)
	me := "faultline-nodeagent on node " + node

	// Its mark: the condition, the evidence and the episode's traceparent in one status patch,
	// and the report of a worker's exit and the record of a barrier's open (which it writes on
	// its own, for a pod that restarts in place); and its word that a worker has shown no
	// progress (the progress watch's).
	mark, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{
			v1alpha1.AnnotationFaultEvidence: fmt.Sprintf(`{"source":"logind","node":%q,"cause":"NodeShutdown"}`, node),
			v1alpha1.AnnotationTraceparent:   "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			v1alpha1.AnnotationWorkerExit:    fmt.Sprintf(`{"attempt":1,"container":"worker","exitCode":1,"node":%q}`, node),
			v1alpha1.AnnotationBarrierRecord: `{"containerID":"c0","restart":0,"attempt":1}`,
		}},
		"status": map[string]any{"conditions": []map[string]any{
			{"type": v1alpha1.PodConditionInfrastructureFault, "status": "True", "reason": "NodeShutdown"},
			{"type": v1alpha1.PodConditionNoProgress, "status": "True", "reason": v1alpha1.ProgressSignalLog},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asAgent.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, mark, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("the agent's own mark on a pod of its node: %v", err)
	}
	for what, patch := range map[string]string{
		"change the Job's controller-uid label": `{"metadata":{"labels":{"batch.kubernetes.io/controller-uid":"forged"}}}`,
		"change the attempt label":              `{"metadata":{"labels":{"faultline.dev/attempt":"7"}}}`,
		"drop a finalizer":                      fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":[%q]}}`, keep),
		"add another annotation":                `{"metadata":{"annotations":{"example.com/steer":"x"}}}`,
		"set the phase":                         `{"status":{"phase":"Failed"}}`,
		"add a foreign condition":               `{"status":{"conditions":[{"type":"DisruptionTarget","status":"True","reason":"EvictionByEvictionAPI"}]}}`,
		"flip the Ready condition":              `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`,
		"write a container's exit":              `{"status":{"containerStatuses":[{"name":"worker","image":"trainer:latest","ready":false,"restartCount":0,"state":{"terminated":{"exitCode":143}}}]}}`,
	} {
		_, err := asAgent.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		requireForbidden(t, "agent: "+what+" of a pod of its node", err, me, "pod "+ns+"/"+pod.Name)
	}
	// Its mark goes on the workers of its own node only: not on a worker of another node, nor
	// on a pod of its node that is no worker (the agent writes nothing else).
	other := cluster.NodeName(0)
	elsewhere := createPod(ctx, t, c, ns, "worker-elsewhere", other, map[string]string{v1alpha1.LabelRun: "r", v1alpha1.LabelAttempt: "1", "test": "elsewhere"})
	_, err = asAgent.CoreV1().Pods(ns).Patch(ctx, elsewhere.Name, types.StrategicMergePatchType, mark, metav1.PatchOptions{}, "status")
	requireForbidden(t, "agent: its mark on a worker of another node", err, me, "pod "+ns+"/"+elsewhere.Name+" on node "+other)
	plain := createPod(ctx, t, c, ns, "not-a-worker", node, map[string]string{"test": "not-a-worker"})
	_, err = asAgent.CoreV1().Pods(ns).Patch(ctx, plain.Name, types.StrategicMergePatchType, mark, metav1.PatchOptions{}, "status")
	requireForbidden(t, "agent: its mark on a pod of its node that is no worker", err, me, "pod "+ns+"/"+plain.Name, "only the workers of runs")

	after, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(after.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == v1alpha1.PodConditionNoProgress && c.Status == corev1.ConditionTrue
	}) {
		t.Errorf("the agent's NoProgress condition is not on the pod: %+v", after.Status.Conditions)
	}
	if after.Labels[v1alpha1.LabelAttempt] != "1" || len(after.Finalizers) != 1 || after.Status.Phase != corev1.PodRunning || after.Annotations["example.com/steer"] != "" {
		t.Errorf("the pod changed despite the refusals: labels %v finalizers %v phase %s annotations %v", after.Labels, after.Finalizers, after.Status.Phase, after.Annotations)
	}

	// Its Node: its marks are let through.
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restoreNode(t, c, n) })
	gpu := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"False","reason":"Xid79","message":"test"}]}}`, v1alpha1.NodeConditionGPUHealthy)
	if _, err := asAgent.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(gpu), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("the agent's GPUHealthy condition on its node: %v", err)
	}
	inPlace := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"False","reason":%q,"message":"test"}]}}`,
		v1alpha1.NodeConditionInPlaceReady, v1alpha1.InPlaceReasonNoRuntime)
	if _, err := asAgent.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(inPlace), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("the agent's InPlaceReady condition on its node: %v", err)
	}
	announce := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationShutdownDetectedAt, time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := asAgent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(announce), metav1.PatchOptions{}); err != nil {
		t.Errorf("the agent's shutdown annotation on its node: %v", err)
	}
	taints := append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintGPUUnhealthy, Value: "Xid79", Effect: corev1.TaintEffectNoSchedule})
	if _, err := asAgent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, taintPatch(t, taints), metav1.PatchOptions{}); err != nil {
		t.Errorf("the agent's GPU taint on its node: %v", err)
	}
	// Anything else is refused.
	steer := append(append([]corev1.Taint(nil), taints...), corev1.Taint{Key: "example.com/steer", Effect: corev1.TaintEffectNoSchedule})
	for what, p := range map[string]struct {
		patch       []byte
		pt          types.PatchType
		subresource []string
	}{
		"label its node":               {[]byte(`{"metadata":{"labels":{"example.com/gpu-class":"h200"}}}`), types.MergePatchType, nil},
		"cordon its node":              {[]byte(`{"spec":{"unschedulable":true}}`), types.MergePatchType, nil},
		"add a foreign taint":          {taintPatch(t, steer), types.MergePatchType, nil},
		"annotate its node otherwise":  {[]byte(`{"metadata":{"annotations":{"example.com/x":"y"}}}`), types.MergePatchType, nil},
		"advertise more GPUs":          {[]byte(`{"status":{"capacity":{"nvidia.com/gpu":"64"},"allocatable":{"nvidia.com/gpu":"64"}}}`), types.MergePatchType, []string{"status"}},
		"flip the kubelet's condition": {[]byte(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"forged"}]}}`), types.StrategicMergePatchType, []string{"status"}},
	} {
		_, err := asAgent.CoreV1().Nodes().Patch(ctx, node, p.pt, p.patch, metav1.PatchOptions{}, p.subresource...)
		requireForbidden(t, "agent: "+what, err, me)
	}
	got, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["example.com/gpu-class"] != "" || got.Spec.Unschedulable || len(got.Spec.Taints) != len(taints) || !got.Status.Capacity.Name(v1alpha1.ResourceGPU, "").Equal(*n.Status.Capacity.Name(v1alpha1.ResourceGPU, "")) {
		t.Errorf("node %s changed despite the refusals: labels %v unschedulable %v taints %v capacity %v", node, got.Labels, got.Spec.Unschedulable, got.Spec.Taints, got.Status.Capacity)
	}

	// Its heartbeat: its own node's Lease, and no other (dry runs: the DaemonSet's agents
	// are not running here, and nothing is left behind).
	leases := asAgent.CoordinationV1().Leases(agentlease.Namespace)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := leases.Create(ctx, agentlease.New(node, time.Now(), agentlease.Duration), dry); err != nil {
		t.Errorf("the agent's own heartbeat: %v", err)
	}
	forged := agentlease.New(other, time.Now(), agentlease.Duration)
	_, err = leases.Create(ctx, forged, dry)
	requireForbidden(t, "agent: the heartbeat of another node's agent", err, me, "may not write Lease "+agentlease.Namespace+"/"+other)
	forged = agentlease.New(node, time.Now(), agentlease.Duration)
	forged.Name = controller.LeaderElectionID
	_, err = leases.Create(ctx, forged, dry)
	requireForbidden(t, "agent: the controller's leader Lease", err, me, "may not write Lease "+agentlease.Namespace+"/"+controller.LeaderElectionID)
	unlabelled := agentlease.New(node, time.Now(), agentlease.Duration)
	unlabelled.Labels = map[string]string{"example.com/x": "y"}
	_, err = leases.Create(ctx, unlabelled, dry)
	requireForbidden(t, "agent: a heartbeat with other labels", err, me, "labelled app.kubernetes.io/name=faultline-nodeagent-heartbeat")
}

func taintPatch(t *testing.T, taints []corev1.Taint) []byte {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": taints}})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// restoreNode takes the test's marks off a node as the admin, who may write nodes.
func restoreNode(t *testing.T, c *cluster.Cluster, was *corev1.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	del := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"$patch":"delete"}]}}`, v1alpha1.NodeConditionGPUHealthy)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, was.Name, types.StrategicMergePatchType, []byte(del), metav1.PatchOptions{}, "status"); err != nil {
		t.Logf("restore node %s: %v", was.Name, err)
	}
	meta := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}},"spec":{"taints":%s}}`, v1alpha1.AnnotationShutdownDetectedAt, mustJSON(was.Spec.Taints))
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, was.Name, types.MergePatchType, []byte(meta), metav1.PatchOptions{}); err != nil {
		t.Logf("restore node %s: %v", was.Name, err)
	}
}

func mustJSON(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	if string(raw) == "null" {
		return "[]"
	}
	return string(raw)
}

// TestE2EControllerCannotTakeOtherLeases: the controller's ServiceAccount may hold its own
// leader Lease in faultline-system and no other: not kube-controller-manager's or
// kube-scheduler's in kube-system, not a node's heartbeat in kube-node-lease. With exactly
// that, and its other grants, the controller elects itself and runs a gang.
func TestE2EControllerCannotTakeOtherLeases(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	asController := controllerClient(ctx, t, c)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for _, l := range []struct{ namespace, name string }{
		{"kube-system", "kube-controller-manager"},
		{"kube-system", "kube-scheduler"},
		{"kube-node-lease", cluster.NodeName(0)},
	} {
		leases := asController.CoordinationV1().Leases(l.namespace)
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("faultline-controller")}}
		_, err := leases.Create(ctx, lease, dry)
		requireForbidden(t, "controller creating Lease "+l.namespace+"/"+l.name, err, `cannot create resource "leases"`)
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		requireForbidden(t, "controller taking Lease "+l.namespace+"/"+l.name, err, `cannot update resource "leases"`)
	}

	// Its own Lease: the controller, with this token alone, elects itself and runs a gang.
	startController(ctx, t, c, ns, "--leader-elect=true", "--leader-election-namespace", systemNamespace)
	w, err := c.Client.CoordinationV1().Leases(systemNamespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + controller.LeaderElectionID})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for held := false; !held; {
		select {
		case <-ctx.Done():
			t.Fatalf("the controller never held its Lease %s/%s: %v", systemNamespace, controller.LeaderElectionID, ctx.Err())
		case e := <-w.ResultChan():
			l, ok := e.Object.(*coordinationv1.Lease)
			held = ok && e.Type != watch.Deleted && ptr.Deref(l.Spec.HolderIdentity, "") != ""
		}
	}
	run := newRun("least-privilege", 2)
	run.Namespace = ns
	run.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: cluster.NodeName(2)}
	asAdmin := clientFor(t, c.Config)
	if err := asAdmin.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	waitRun(ctx, t, asAdmin, ns, run.Name, "Running under a least-privilege controller", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Phase == v1alpha1.PhaseRunning
	})
}

// TestE2EControllerPodWritesAreConfined: the controller's RBAC lets it patch and delete any
// pod of the cluster; admission keeps it to the workers of runs, and its patches to what a
// teardown needs: dropping the Job-tracking finalizer.
func TestE2EControllerPodWritesAreConfined(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	asController := controllerClient(ctx, t, c)
	const keep = "test.faultline.dev/keep"
	node := cluster.NodeName(2)
	worker := createPod(ctx, t, c, ns, "worker", node, map[string]string{v1alpha1.LabelRun: "r", v1alpha1.LabelAttempt: "1"}, "batch.kubernetes.io/job-tracking", keep)
	dropFinalizers(t, c, worker)
	other := createPod(ctx, t, c, ns, "other", node, map[string]string{"app": "other"})
	pods := asController.CoreV1().Pods(ns)
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}

	// What a restart needs is let through.
	dropTracking := `{"metadata":{"$deleteFromPrimitiveList/finalizers":["batch.kubernetes.io/job-tracking"]}}`
	if _, err := pods.Patch(ctx, worker.Name, types.StrategicMergePatchType, []byte(dropTracking), dry); err != nil {
		t.Errorf("controller dropping a worker's Job-tracking finalizer: %v", err)
	}
	if err := pods.Delete(ctx, worker.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("controller deleting a worker: %v", err)
	}
	// Nothing else.
	image := `{"spec":{"containers":[{"name":"worker","image":"attacker/miner:latest"}]}}`
	_, err := pods.Patch(ctx, other.Name, types.StrategicMergePatchType, []byte(image), dry)
	requireForbidden(t, "controller changing the image of a pod of no run", err, "no worker of a TrainingRun")
	err = pods.Delete(ctx, other.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	requireForbidden(t, "controller deleting a pod of no run", err, "no worker of a TrainingRun")
	for what, patch := range map[string]string{
		"change a worker's image":        image,
		"relabel a worker":               `{"metadata":{"labels":{"faultline.dev/attempt":"9"}}}`,
		"drop another finalizer":         fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":[%q]}}`, keep),
		"annotate a worker":              `{"metadata":{"annotations":{"example.com/x":"y"}}}`,
		"add a toleration to a worker":   `{"spec":{"tolerations":[{"key":"example.com/any","operator":"Exists"}]}}`,
		"set a worker's active deadline": `{"spec":{"activeDeadlineSeconds":1}}`,
		"add a finalizer to a worker":    `{"metadata":{"finalizers":["example.com/hold"]}}`,
	} {
		_, err := pods.Patch(ctx, worker.Name, types.StrategicMergePatchType, []byte(patch), dry)
		requireForbidden(t, "controller: "+what, err, "faultline-controller may not", "pod "+ns+"/"+worker.Name)
	}

	// Scheduling gates: it may release none (a quota's, a scheduler's).
	gated := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: ns, Labels: map[string]string{v1alpha1.LabelRun: "r", v1alpha1.LabelAttempt: "2"}},
		Spec: corev1.PodSpec{
			RestartPolicy:   corev1.RestartPolicyNever,
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "example.com/quota"}},
			Containers:      []corev1.Container{{Name: "worker", Image: "trainer:latest"}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, gated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	release := `{"spec":{"schedulingGates":[{"$patch":"delete","name":"example.com/quota"}]}}`
	_, err = pods.Patch(ctx, gated.Name, types.StrategicMergePatchType, []byte(release), dry)
	requireForbidden(t, "controller releasing a scheduling gate", err, "faultline-controller may not change the containers, tolerations, scheduling gates")
}

// TestE2ETenantCannotRelabelAWorker: what a worker is (its run, attempt, role and index
// labels, its completion index) is set when it is made and changed by no one after
// (deploy/admission/identity.yaml): a tenant with the edit role that relabels its worker is
// refused with a message naming the key, so is the cluster admin, and a label of the
// tenant's own still changes.
func TestE2ETenantCannotRelabelAWorker(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	tr := runAsTenant(ctx, t, c, ns, "relabel")
	asTenant, tenantUser, victim := tr.client, tr.user, tr.victim

	labelPatch := func(key, value string) []byte {
		return []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value))
	}
	// A policy takes effect a moment after it is made: wait for the admin's dry run to be
	// refused, then try for real.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(ns).Patch(ctx, victim.Name, types.MergePatchType, labelPatch(v1alpha1.LabelAttempt, "7"), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		t.Fatalf("the identity policy is not enforced: %v", err)
	}
	for key, value := range map[string]string{
		v1alpha1.LabelAttempt:                "7",           // a pod of a later attempt
		v1alpha1.LabelRunUID:                 "another-run", // another run's gang
		v1alpha1.LabelRole:                   "chief",       // added: the coordinator
		batchv1.JobCompletionIndexAnnotation: "1",           // another index
	} {
		err := asTenant.Patch(ctx, victim.DeepCopy(), client.RawPatch(types.MergePatchType, labelPatch(key, value)))
		requireForbidden(t, "tenant setting label "+key, err, "label "+key, tenantUser, "may not add, change or remove it")
	}
	_, err := c.Client.CoreV1().Pods(ns).Patch(ctx, victim.Name, types.MergePatchType, labelPatch(v1alpha1.LabelAttempt, "7"), metav1.PatchOptions{})
	requireForbidden(t, "the admin changing the attempt label", err, "label "+v1alpha1.LabelAttempt)
	_, err = c.Client.CoreV1().Pods(ns).Patch(ctx, victim.Name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+batchv1.JobCompletionIndexAnnotation+`":"1"}}}`), metav1.PatchOptions{})
	requireForbidden(t, "the admin changing the completion index annotation", err, "annotation "+batchv1.JobCompletionIndexAnnotation)

	if err := asTenant.Patch(ctx, victim.DeepCopy(), client.RawPatch(types.MergePatchType, labelPatch("team", "b"))); err != nil {
		t.Errorf("tenant setting a label of its own: %v", err)
	}
	got, err := c.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{v1alpha1.LabelAttempt, v1alpha1.LabelRunUID, v1alpha1.LabelRun, batchv1.JobCompletionIndexAnnotation} {
		if got.Labels[key] != victim.Labels[key] {
			t.Errorf("label %s of the worker is %q, was %q", key, got.Labels[key], victim.Labels[key])
		}
	}
	if _, ok := got.Labels[v1alpha1.LabelRole]; ok || got.Labels["team"] != "b" {
		t.Errorf("labels %v: want no role and the tenant's team=b", got.Labels)
	}
}

// tenantRun is a two-worker run that a tenant (a ServiceAccount with the built-in edit role)
// created in ns, Running, with the controller for ns started.
type tenantRun struct {
	client, admin client.WithWatch
	user          string
	run           *v1alpha1.TrainingRun
	victim        *corev1.Pod // one of its workers
}

func runAsTenant(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) tenantRun {
	t.Helper()
	startController(ctx, t, c, ns, "--leader-elect=false")
	tr := tenantRun{run: newRun(name, 2)}
	tr.client, tr.user = tenant(ctx, t, c, ns)
	tr.run.Namespace = ns
	tr.run.Spec.FailurePolicy.SettleSeconds = ptr.To[int32](1)
	// Away from the node whose agent token another test uses.
	tr.run.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: cluster.NodeName(0)}
	if err := tr.client.Create(ctx, tr.run); err != nil {
		t.Fatalf("tenant with the edit role creating a TrainingRun: %v", err)
	}
	tr.admin = clientFor(t, c.Config)
	waitRun(ctx, t, tr.admin, ns, name, "Running", func(r *v1alpha1.TrainingRun) bool { return r.Status.Phase == v1alpha1.PhaseRunning })
	tr.victim = runningWorkers(ctx, t, c, ns, name, 2)[0]
	return tr
}

// TestE2EControllerCannotCreateForeignPods: the controller's RBAC lets it create any pod in
// any namespace; admission keeps it to the workers of a run's Job: a pod of no run, a pod no
// Job controls, a pod whose Job is not its run's, and any pod in a system namespace (where a
// pod would run with the token of one of the cluster's or faultline's own ServiceAccounts)
// are refused, each with the rule named; a worker of its run's Job in the run's namespace
// goes through.
func TestE2EControllerCannotCreateForeignPods(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	asController := controllerClient(ctx, t, c)
	jobOf := func(name string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: "3e0f6f8e-0000-4000-8000-000000000001", Controller: ptr.To(true)}
	}
	pod := func(ns, run, sa string, owners ...metav1.OwnerReference) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "w-", Namespace: ns, OwnerReferences: owners},
			Spec: corev1.PodSpec{
				ServiceAccountName: sa, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "worker", Image: "trainer:latest"}},
			},
		}
		if run != "" {
			p.Labels = map[string]string{v1alpha1.LabelRun: run, v1alpha1.LabelAttempt: "1"}
		}
		return p
	}
	create := func(p *corev1.Pod) error {
		_, err := asController.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}

	if err := create(pod(ns, "llm", "", jobOf("llm"))); err != nil {
		t.Errorf("the controller creating a worker of its run's Job: %v", err)
	}
	requireForbidden(t, "a pod of no run", create(pod(ns, "", "", jobOf("llm"))), "no worker of a TrainingRun")
	requireForbidden(t, "a worker no Job controls", create(pod(ns, "llm", "")), "only the workers of a Job")
	requireForbidden(t, "a worker of another Job", create(pod(ns, "llm", "", jobOf("other"))), "its Job is not the one of its run")
	for _, sys := range []struct{ ns, sa string }{{systemNamespace, "faultline-nodeagent"}, {systemNamespace, controllerSA}, {"kube-system", "default"}} {
		requireForbidden(t, "a worker in "+sys.ns+" as "+sys.sa, create(pod(sys.ns, "llm", sys.sa, jobOf("llm"))),
			"faultline-controller may not create pod "+sys.ns+"/", sys.ns+" is a system namespace")
	}
}
