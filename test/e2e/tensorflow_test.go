package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework/expansion"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2ETensorFlowPSRoles: a ParameterServerStrategy run (one chief, two parameter servers,
// a worker and an evaluator) on the real control plane. Its pods are the controller's to
// create (a gang's), each labelled with its role and role index as it is made, so the run
// needs no admission policy: it starts while the faultline-roles policy is missing. Each
// pod's TF_CONFIG, expanded from the stored pod as the kubelet would, has the pod's own task
// (tfconfig_cluster_resolver.py reads "task"), whose address in "cluster" is the pod's own
// (the evaluator has a task and no place in "cluster"), "rpc_layer" grpc, and
// GRPC_FAIL_FAST=use_caller. The plugin's default success policy, Leader, is written into
// the run; when the chief's pod succeeds the run Succeeds, spending nothing, and the parameter
// servers, the worker and the evaluator (which never exit by themselves) are stopped. The
// same layout with restartScope Index, whose pods the Job controller creates and only the
// policy can label, waits while the policy is missing, Stalled (RolesPolicyMissing) with
// the fix, with no Job created; once the policy is installed as `launcher install` installs
// it (deploy/admission/roles.yaml), it starts, its pods labelled by the API server's admission.
func TestE2ETensorFlowPSRoles(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	// (This is the only scenario that uses the cluster-wide policy, so it may take it away.)
	removeRolesPolicy(ctx, t, c)
	psLayout := func(r *v1alpha1.TrainingRun) {
		r.Spec.Framework = "tensorflow"
		r.Spec.FrameworkOptions = map[string]string{"strategy": "parameter-server", "ps": "2", "evaluator": "1"}
	}
	// Index scope: the Job controller's pods would start without their role, so the run
	// waits, Stalled with the fix, and starts no pod.
	indexRun := createRun(ctx, t, c, ns, newRun("ctr-index", 5, withoutGPUs(), psLayout, func(r *v1alpha1.TrainingRun) {
		r.Spec.RestartScope = v1alpha1.RestartScopeIndex
	}))
	// A gang: the controller labels its pods itself, no policy needed.
	run := createRun(ctx, t, c, ns, newRun("ctr", 5, withoutGPUs(), psLayout))
	stalled := waitRun(ctx, t, c, ns, indexRun.Name, "Stalled, RolesPolicyMissing", func(r *v1alpha1.TrainingRun) bool {
		cond := runCondition(r, v1alpha1.ConditionStalled)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == v1alpha1.ReasonRolesPolicyMissing
	})
	msg := runCondition(stalled, v1alpha1.ConditionStalled).Message
	for _, want := range []string{"chief:0-0,ps:1-2,worker:3-3,evaluator:4-4", "faultline-roles", "kubectl apply --server-side -k deploy/admission"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Stalled message %q does not name %q", msg, want)
		}
	}
	if _, err := c.Client.BatchV1().Jobs(ns).Get(ctx, indexRun.Name, metav1.GetOptions{}); err == nil {
		t.Errorf("an Index-scope Job was created while the roles policy was missing")
	}

	waitRun(ctx, t, c, ns, run.Name, "attempt 1 of the gang Running without the policy", runningAttempt(1))
	pods := waitWorkers(ctx, t, c, ns, run.Name, 1, 5)
	if got := getRun(ctx, t, c, ns, run.Name).Spec.SuccessPolicy; got != v1alpha1.SuccessPolicyLeader {
		t.Errorf("spec.successPolicy %q, want the plugin's Leader written into the run", got)
	}
	addr := func(i int) string { return fmt.Sprintf("ctr-%d.ctr.%s.svc:2222", i, ns) }
	wantCluster := map[string][]string{"chief": {addr(0)}, "ps": {addr(1), addr(2)}, "worker": {addr(3)}}
	wantTasks := []struct {
		typ   string
		index int
	}{{"chief", 0}, {"ps", 0}, {"ps", 1}, {"worker", 0}, {"evaluator", 0}}
	for i, want := range wantTasks {
		pod := pods[i]
		if pod.Labels[v1alpha1.LabelRole] != want.typ || pod.Labels[v1alpha1.LabelRoleIndex] != strconv.Itoa(want.index) {
			t.Errorf("pod %s (index %d): labels %s=%q %s=%q, want %s and %d from the controller", pod.Name, i,
				v1alpha1.LabelRole, pod.Labels[v1alpha1.LabelRole], v1alpha1.LabelRoleIndex, pod.Labels[v1alpha1.LabelRoleIndex], want.typ, want.index)
		}
		env, err := expansion.Pod(pod.Spec.Containers[0].Env, pod)
		if err != nil {
			t.Fatalf("pod %s: %v", pod.Name, err)
		}
		var cfg struct {
			Cluster map[string][]string `json:"cluster"`
			Task    struct {
				Type  string `json:"type"`
				Index *int   `json:"index"`
			} `json:"task"`
			RPCLayer string `json:"rpc_layer"`
		}
		dec := json.NewDecoder(strings.NewReader(env["TF_CONFIG"]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			t.Errorf("pod %s (index %d): TF_CONFIG %s is not TensorFlow's JSON: %v", pod.Name, i, env["TF_CONFIG"], err)
			continue
		}
		if cfg.Task.Type != want.typ || cfg.Task.Index == nil || *cfg.Task.Index != want.index {
			t.Errorf("pod %s (index %d): task %q/%v, want %s/%d", pod.Name, i, cfg.Task.Type, cfg.Task.Index, want.typ, want.index)
		}
		if diff := cmp.Diff(wantCluster, cfg.Cluster); diff != "" {
			t.Errorf("pod %s: cluster (-want +got):\n%s", pod.Name, diff)
		}
		if want.typ != "evaluator" && cfg.Task.Index != nil {
			if tasks := cfg.Cluster[cfg.Task.Type]; *cfg.Task.Index >= len(tasks) || tasks[*cfg.Task.Index] != addr(i) {
				t.Errorf("pod %s (index %d): its task's address in the cluster is not its own %s", pod.Name, i, addr(i))
			}
		}
		if cfg.RPCLayer != "grpc" {
			t.Errorf("pod %s: rpc_layer %q, want grpc", pod.Name, cfg.RPCLayer)
		}
		if env["GRPC_FAIL_FAST"] != "use_caller" {
			t.Errorf("pod %s: GRPC_FAIL_FAST=%q, want use_caller", pod.Name, env["GRPC_FAIL_FAST"])
		}
	}

	chief := pods[0]
	completeWorker(ctx, t, c, chief)
	done := waitRun(ctx, t, c, ns, run.Name, "Succeeded or Failed", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Phase == v1alpha1.PhaseSucceeded || r.Status.Phase == v1alpha1.PhaseFailed
	})
	if done.Status.Phase != v1alpha1.PhaseSucceeded || done.Status.LastFailure != nil {
		t.Fatalf("the chief succeeded, the run ended %s", describeRun(done))
	}
	requireRestarts(t, done, v1alpha1.RestartCounts{})
	// The others are stopped: gone, or no longer running.
	if left, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 1), func(ps []*corev1.Pod) (bool, error) {
		for _, p := range ps {
			if p.UID != chief.UID && cluster.PodLive(p) && p.DeletionTimestamp == nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the parameter servers, the worker and the evaluator were not stopped after the chief succeeded: %v; pods: %s", err, describePods(left))
	}

	// The Index-scope run starts once the policy is there, its pods labelled by admission.
	installRolesPolicy(ctx, t, c, ns)
	waitRun(ctx, t, c, ns, indexRun.Name, "the Index-scope run Running once the policy is installed", runningAttempt(1))
	for i, pod := range waitWorkers(ctx, t, c, ns, indexRun.Name, 1, 5) {
		if pod.Labels[v1alpha1.LabelRole] != wantTasks[i].typ || pod.Labels[v1alpha1.LabelRoleIndex] != strconv.Itoa(wantTasks[i].index) {
			t.Errorf("Index-scope pod %s (index %d): labels %s=%q %s=%q, want %s and %d from the roles policy", pod.Name, i,
				v1alpha1.LabelRole, pod.Labels[v1alpha1.LabelRole], v1alpha1.LabelRoleIndex, pod.Labels[v1alpha1.LabelRoleIndex], wantTasks[i].typ, wantTasks[i].index)
		}
	}
}

// TestE2ETensorFlowRoleTemplates: spec.roles gives one role's pods their own resources and
// nodes (parameter servers with no GPU, on the nodes a selector picks, with a toleration of
// their own) and the other roles' pods the template as it is; a role the framework's layout
// does not have stalls the run with the field named, and no Job is made for it.
func TestE2ETensorFlowRoleTemplates(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	psLayout := func(r *v1alpha1.TrainingRun) {
		r.Spec.Framework = "tensorflow"
		r.Spec.FrameworkOptions = map[string]string{"strategy": "parameter-server", "ps": "2"}
	}
	withRoles := func(roles ...v1alpha1.RoleTemplate) runOption {
		return func(r *v1alpha1.TrainingRun) { r.Spec.Roles = roles }
	}
	cpu := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
	zone := map[string]string{corev1.LabelTopologyZone: "zone-a"}
	toleration := corev1.Toleration{Key: "example.com/cpu-pool", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	ps := v1alpha1.RoleTemplate{Name: "ps", NodeSelector: zone, Tolerations: []corev1.Toleration{toleration},
		Containers: []v1alpha1.RoleContainer{{Name: "worker", Resources: corev1.ResourceRequirements{Requests: cpu, Limits: cpu}}}}
	run := createRun(ctx, t, c, ns, newRun("ctr-roles", 4, psLayout, withRoles(ps)))
	bad := createRun(ctx, t, c, ns, newRun("ctr-badrole", 4, psLayout, withRoles(v1alpha1.RoleTemplate{Name: "parameter-server"})))

	stalled := waitRun(ctx, t, c, ns, bad.Name, "Stalled, RolesInvalid", func(r *v1alpha1.TrainingRun) bool {
		cond := runCondition(r, v1alpha1.ConditionStalled)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == v1alpha1.ReasonRolesInvalid
	})
	msg := runCondition(stalled, v1alpha1.ConditionStalled).Message
	for _, want := range []string{`spec.roles[0].name: "parameter-server"`, "chief, ps, worker"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Stalled message %q does not name %q", msg, want)
		}
	}
	if _, err := c.Client.BatchV1().Jobs(ns).Get(ctx, bad.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Job for the run with an unknown role: %v, want none", err)
	}

	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	for i, pod := range waitWorkers(ctx, t, c, ns, run.Name, 1, 4) {
		role := pod.Labels[v1alpha1.LabelRole]
		res := pod.Spec.Containers[0].Resources
		gpus := res.Limits[corev1.ResourceName(v1alpha1.ResourceGPU)]
		tolerated := slices.ContainsFunc(pod.Spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Key == toleration.Key })
		if role != "ps" {
			if gpus.Value() != 1 || tolerated || pod.Spec.NodeSelector[corev1.LabelTopologyZone] != "" {
				t.Errorf("%s pod %s (index %d): %v GPUs, ps toleration %v, nodeSelector %v; want the template's (1 GPU, neither)", role, pod.Name, i, gpus.Value(), tolerated, pod.Spec.NodeSelector)
			}
			continue
		}
		if !gpus.IsZero() || !res.Requests.Cpu().Equal(resource.MustParse("500m")) || !tolerated || pod.Spec.NodeSelector[corev1.LabelTopologyZone] != "zone-a" {
			t.Errorf("ps pod %s (index %d): resources %v, ps toleration %v, nodeSelector %v; want spec.roles' (500m CPU, no GPU, the toleration, zone-a)", pod.Name, i, res, tolerated, pod.Spec.NodeSelector)
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Labels[corev1.LabelTopologyZone] != "zone-a" {
			t.Errorf("ps pod %s runs on %s in %q, want a node of zone-a", pod.Name, node.Name, node.Labels[corev1.LabelTopologyZone])
		}
	}
}

// removeRolesPolicy deletes the faultline-roles policy and its binding, where they are.
func removeRolesPolicy(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	adm := c.Client.AdmissionregistrationV1()
	if err := adm.MutatingAdmissionPolicyBindings().Delete(ctx, v1alpha1.RolesPolicyName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := adm.MutatingAdmissionPolicies().Delete(ctx, v1alpha1.RolesPolicyName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// installRolesPolicy applies the faultline-roles MutatingAdmissionPolicy and its binding
// (cluster-wide; it changes only pods with the roles annotation, so the other scenarios are
// untouched) and waits until the API server applies it: a policy takes effect some time after
// it is created, and nothing can be watched for that. The probe is a dry-run creation of a pod
// with the annotations the policy reads, so it stores nothing.
func installRolesPolicy(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	path := filepath.Join(c.Tools.Root, "deploy", "admission", "roles.yaml")
	if _, err := c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", path); err != nil {
		t.Fatal(err)
	}
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "roles-probe", Namespace: ns, Annotations: map[string]string{
			v1alpha1.AnnotationRoles:             "chief:0-0,ps:1-2",
			batchv1.JobCompletionIndexAnnotation: "2",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
	}
	var last map[string]string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().Pods(ns).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, nil
		}
		last = got.Labels
		return got.Labels[v1alpha1.LabelRole] == "ps" && got.Labels[v1alpha1.LabelRoleIndex] == "1", nil
	})
	if err != nil {
		t.Fatalf("the faultline-roles policy never labelled a probe pod (index 2 of chief:0-0,ps:1-2 is ps/1): %v; last labels %v", err, last)
	}
}
