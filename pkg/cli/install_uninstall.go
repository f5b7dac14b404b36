package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// `launcher uninstall` takes out everything `launcher install` put in, in the order that
// leaves nothing stuck:
//
//  1. the TrainingRuns and NodeMaintenances, while the controller still runs: it stops each
//     run's workers and lets go of the attempts' Jobs (faultline.dev/attempt-job), and a
//     maintenance hands its nodes back. Runs that have not finished are refused unless
//     --force, which names the runs it ends;
//  2. any faultline finalizer still on a Job (a controller that was not running), so that
//     nothing waits on a controller that is gone;
//  3. the installed objects in the reverse of their install order: the node agent, the
//     controller (waiting until their pods are gone), the admission policies (no part of
//     faultline runs unguarded), the namespace, the CRDs;
//  4. the node agent's marks on the Nodes: its conditions, annotations and taint.

// UninstallOptions shape an uninstall.
type UninstallOptions struct {
	// Force ends the runs that have not finished (and maintenances in progress).
	Force bool
	// Timeout bounds each wait (the runs' teardown, the pods' and the namespace's end).
	Timeout time.Duration
}

var (
	gvrTrainingRuns     = v1alpha1.GroupVersion.WithResource(v1alpha1.ResourceTrainingRun)
	gvrNodeMaintenances = v1alpha1.GroupVersion.WithResource(v1alpha1.ResourceNodeMaintenance)
	gvrJobs             = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	gvrPods             = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
)

// Uninstall removes faultline from the cluster cfg reaches, saying what it does on out.
func Uninstall(ctx context.Context, cfg *rest.Config, o UninstallOptions, out io.Writer) error {
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// 1. The runs and maintenances, while the controller can still tear them down.
	runs, err := listAll(ctx, dyn, gvrTrainingRuns)
	if err != nil {
		return err
	}
	maints, err := listAll(ctx, dyn, gvrNodeMaintenances)
	if err != nil {
		return err
	}
	var active []string
	for _, r := range runs {
		if phase, _, _ := unstructured.NestedString(r.Object, "status", "phase"); phase != string(v1alpha1.PhaseSucceeded) && phase != string(v1alpha1.PhaseFailed) {
			active = append(active, fmt.Sprintf("trainingrun %s/%s (%s)", r.GetNamespace(), r.GetName(), orDash(phase)))
		}
	}
	for _, m := range maints {
		if phase, _, _ := unstructured.NestedString(m.Object, "status", "phase"); phase != string(v1alpha1.MaintenanceCompleted) {
			active = append(active, fmt.Sprintf("nodemaintenance %s (%s)", m.GetName(), orDash(phase)))
		}
	}
	if len(active) > 0 && !o.Force {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%d not finished: %s; uninstalling would end them (their workers stopped, their nodes handed back): "+
			"wait for them, delete them, or run `launcher uninstall --force`; nothing was removed", len(active), strings.Join(active, ", "))}
	}
	if len(active) > 0 {
		fmt.Fprintf(out, "ending %d not finished: %s\n", len(active), strings.Join(active, ", "))
	}
	for _, l := range []struct {
		gvr  schema.GroupVersionResource
		objs []*unstructured.Unstructured
	}{{gvrTrainingRuns, runs}, {gvrNodeMaintenances, maints}} {
		for _, u := range l.objs {
			if err := deleteObject(ctx, dyn.Resource(l.gvr).Namespace(u.GetNamespace()), u.GetName()); err != nil {
				return err
			}
			fmt.Fprintf(out, "%s.%s/%s deleted\n", strings.TrimSuffix(l.gvr.Resource, "s"), l.gvr.Group, qualified(u))
		}
	}
	for _, l := range []struct {
		gvr  schema.GroupVersionResource
		objs []*unstructured.Unstructured
	}{{gvrTrainingRuns, runs}, {gvrNodeMaintenances, maints}} {
		for _, u := range l.objs {
			if err := waitGone(ctx, dyn.Resource(l.gvr).Namespace(u.GetNamespace()), u.GetName(), o.Timeout); err != nil {
				return fmt.Errorf("%s %s: %w (is the controller running? `kubectl -n %s get pods`)", l.gvr.Resource, qualified(u), err, v1alpha1.NodeAgentNamespace)
			}
		}
	}
	// 2. The attempts' Jobs the controller did not let go.
	if err := releaseJobs(ctx, dyn, out); err != nil {
		return err
	}
	// 3. What the install applied, in reverse.
	objs, err := Manifests(InstallOptions{Components: slices.Concat(InstallComponents, OptionalComponents)})
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	var deleted []deletedObject
	for i := len(objs) - 1; i >= 0; i-- {
		u := objs[i]
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			continue // never installed here (the cluster does not even serve it)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
		}
		var res dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			res = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		}
		err = deleteObject(ctx, res, u.GetName())
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("delete %s %s: %w", strings.ToLower(gvk.Kind), u.GetName(), err)
		}
		fmt.Fprintf(out, "%s/%s deleted\n", kindName(gvk), u.GetName())
		deleted = append(deleted, deletedObject{res: res, name: u.GetName(), what: kindName(gvk) + "/" + u.GetName()})
		// The agent and the controller are gone before their guards and their namespace.
		if gvk.Kind == "DaemonSet" || gvk.Kind == "Deployment" {
			if err := waitPodsGone(ctx, cs, u, o.Timeout); err != nil {
				return err
			}
		}
	}
	for _, d := range deleted {
		if err := waitGone(ctx, d.res, d.name, o.Timeout); err != nil {
			return fmt.Errorf("%s: %w", d.what, err)
		}
	}
	// 4. The agent's marks on the nodes.
	if err := unmarkNodes(ctx, cs, out); err != nil {
		return err
	}
	// 5. What the runs made, which the garbage collector deletes after them: nothing of
	// faultline's is left when uninstall says it is done.
	return waitRunObjectsGone(ctx, cs, o.Timeout)
}

// waitRunObjectsGone waits until no Job, pod or Service of a run (label faultline.dev/run) is
// left. They go with their run, by the garbage collector, and a pod on a node once its
// kubelet has stopped it: a moment after the run, seconds for a pod with a grace period.
func waitRunObjectsGone(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	sel := metav1.ListOptions{LabelSelector: v1alpha1.LabelRun}
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		// What the last complete look found stays in left: a look cut short by the
		// deadline must not leave the error without the names.
		var now []string
		jobs, err := cs.BatchV1().Jobs("").List(ctx, sel)
		if err != nil {
			return false, err
		}
		for _, j := range jobs.Items {
			now = append(now, "job "+j.Namespace+"/"+j.Name)
		}
		pods, err := cs.CoreV1().Pods("").List(ctx, sel)
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			now = append(now, "pod "+p.Namespace+"/"+p.Name+" on "+orDash(p.Spec.NodeName))
		}
		svcs, err := cs.CoreV1().Services("").List(ctx, sel)
		if err != nil {
			return false, err
		}
		for _, s := range svcs.Items {
			now = append(now, "service "+s.Namespace+"/"+s.Name)
		}
		left = now
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("faultline is removed, but what its runs made is still there after %s: %s "+
			"(the garbage collector deletes it after its run; a pod goes once its node has stopped it, and a finalizer of another's holds it): %w",
			timeout, strings.Join(left, ", "), err)
	}
	return nil
}

type deletedObject struct {
	res        dynamic.ResourceInterface
	name, what string
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func qualified(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// listAll lists gvr in every namespace; nothing when the cluster does not serve it (no CRD).
func listAll(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource) ([]*unstructured.Unstructured, error) {
	l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
	}
	out := make([]*unstructured.Unstructured, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, nil
}

// deleteObject deletes name, its dependents in the background (the garbage collector).
func deleteObject(ctx context.Context, res dynamic.ResourceInterface, name string) error {
	return res.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
}

// waitGone waits until name is gone.
func waitGone(ctx context.Context, res dynamic.ResourceInterface, name string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := res.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return fmt.Errorf("still there after %s: %w", timeout, err)
	}
	return nil
}

// waitPodsGone waits until the pods of a deleted Deployment or DaemonSet are gone.
func waitPodsGone(ctx context.Context, cs kubernetes.Interface, owner *unstructured.Unstructured, timeout time.Duration) error {
	sel, _, _ := unstructured.NestedStringMap(owner.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 {
		return nil
	}
	var parts []string
	for k, v := range sel {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(owner.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: strings.Join(parts, ",")})
		if err != nil {
			return false, err
		}
		left = left[:0]
		for _, p := range pods.Items {
			left = append(left, p.Name+" on "+orDash(p.Spec.NodeName))
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the pods of %s %s/%s still run after %s: %s", strings.ToLower(owner.GetKind()), owner.GetNamespace(), owner.GetName(), timeout, strings.Join(left, ", "))
	}
	return nil
}

// releaseJobs takes faultline's finalizer off every Job that still has it, and the Job
// tracking finalizer off the runs' pods: with the runs gone, nothing would ever take them off.
func releaseJobs(ctx context.Context, dyn dynamic.Interface, out io.Writer) error {
	jobs, err := listAll(ctx, dyn, gvrJobs)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if err := dropFinalizer(ctx, dyn.Resource(gvrJobs).Namespace(j.GetNamespace()), "job.batch", j, v1alpha1.FinalizerAttemptJob, out); err != nil {
			return fmt.Errorf("release job %s: %w", qualified(j), err)
		}
	}
	// A gang's pods are the controller's (their Job is managed by faultline): the Job
	// controller never takes its tracking finalizer off them, the controller does.
	pods, err := dyn.Resource(gvrPods).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun})
	if err != nil {
		return fmt.Errorf("list the runs' pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if err := dropFinalizer(ctx, dyn.Resource(gvrPods).Namespace(p.GetNamespace()), "pod", p, batchv1.JobTrackingFinalizer, out); err != nil {
			return fmt.Errorf("release pod %s: %w", qualified(p), err)
		}
	}
	return nil
}

// dropFinalizer takes finalizer off u, if it still has it, and says so. The controller may be
// letting the same object go at the same moment (a run just deleted): a write that conflicts
// reads the object again, and one already let go (or gone) is done.
func dropFinalizer(ctx context.Context, res dynamic.ResourceInterface, kind string, u *unstructured.Unstructured, finalizer string, out io.Writer) error {
	dropped := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fins := u.GetFinalizers()
		if !slices.Contains(fins, finalizer) {
			return nil
		}
		keep := slices.DeleteFunc(slices.Clone(fins), func(f string) bool { return f == finalizer })
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": keep, "resourceVersion": u.GetResourceVersion()}})
		_, err := res.Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) {
			fresh, gerr := res.Get(ctx, u.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			u = fresh
		}
		dropped = err == nil
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if dropped {
		fmt.Fprintf(out, "%s/%s released (finalizer %s)\n", kind, qualified(u), finalizer)
	}
	return err
}

// unmarkNodes takes the node agent's marks off every Node: its conditions
// (faultline.dev/…), annotations and taint. Nothing else writes under faultline.dev/ there.
func unmarkNodes(ctx context.Context, cs kubernetes.Interface, out io.Writer) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	prefix := v1alpha1.GroupName + "/"
	for _, n := range nodes.Items {
		var conds []map[string]any
		for _, c := range n.Status.Conditions {
			if strings.HasPrefix(string(c.Type), prefix) {
				conds = append(conds, map[string]any{"type": string(c.Type), "$patch": "delete"})
			}
		}
		if len(conds) > 0 {
			patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
			if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
				return fmt.Errorf("node %s: remove faultline's conditions: %w", n.Name, err)
			}
		}
		annotations := map[string]any{}
		for k := range n.Annotations {
			if strings.HasPrefix(k, prefix) {
				annotations[k] = nil
			}
		}
		var taints []any
		dropped := false
		for _, t := range n.Spec.Taints {
			if strings.HasPrefix(t.Key, prefix) {
				dropped = true
				continue
			}
			taints = append(taints, t)
		}
		if len(annotations) > 0 || dropped {
			m := map[string]any{"metadata": map[string]any{"annotations": annotations, "resourceVersion": n.ResourceVersion}}
			if dropped {
				m["spec"] = map[string]any{"taints": taints}
			}
			patch, _ := json.Marshal(m)
			if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("node %s: remove faultline's annotations and taint: %w", n.Name, err)
			}
		}
		if len(conds) > 0 || len(annotations) > 0 || dropped {
			fmt.Fprintf(out, "node/%s: faultline's marks removed\n", n.Name)
		}
	}
	return nil
}
