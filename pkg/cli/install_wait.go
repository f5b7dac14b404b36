package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// DefaultInstallTimeout bounds `launcher install`'s wait for its rollouts: the images' pulls
// on every node (three images of tens of MB), the controller's start and its election, and the
// agents' start, on a large cluster's slowest node.
const DefaultInstallTimeout = 5 * time.Minute

// imagePullFailures are the reasons the kubelet gives a container whose image it cannot get.
var imagePullFailures = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"}

// rollout is one workload install waits for, and what it last found.
type rollout struct {
	kind, namespace, name string
	ready                 bool
	why                   string // why it is not ready yet
}

// waitedFor are the kinds WaitReady waits for: the workloads' rollouts, and the admission
// policies' bindings (and, for a ValidatingAdmissionPolicy, the API server's check of its
// expressions).
var waitedFor = []string{"Deployment", "DaemonSet", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"}

// WaitReady waits until every Deployment and DaemonSet of objs has rolled out (its pods of the
// current template Ready everywhere it is to run) and every admission policy of objs is in
// force (bound, and its expressions checked by the API server without a warning). A pod whose
// image cannot be pulled ends the wait at once, naming the image and the fix, as does one that
// crashes in a loop, a policy no binding names or one whose expressions do not type-check; at
// the deadline it names each one not ready and why. It says which nodes run no agent.
func WaitReady(ctx context.Context, client kubernetes.Interface, objs []*unstructured.Unstructured, timeout time.Duration, out io.Writer) error {
	var rollouts []*rollout
	for _, u := range objs {
		if k := u.GetKind(); slices.Contains(waitedFor, k) {
			rollouts = append(rollouts, &rollout{kind: k, namespace: u.GetNamespace(), name: u.GetName()})
		}
	}
	if len(rollouts) == 0 {
		return nil
	}
	start := time.Now()
	var failed error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		done := true
		for _, r := range rollouts {
			if r.ready {
				continue
			}
			if err := r.check(ctx, client); err != nil {
				failed = err
				return false, err
			}
			done = done && r.ready
		}
		return done, nil
	})
	if failed != nil {
		return &ExitError{Code: ExitUsage, Err: failed}
	}
	if err != nil {
		var why []string
		for _, r := range rollouts {
			if !r.ready {
				why = append(why, fmt.Sprintf("%s %s/%s: %s", strings.ToLower(r.kind), r.namespace, r.name, r.why))
			}
		}
		return UsageError("installed, but not running after %s (--timeout):\n  %s", timeout, strings.Join(why, "\n  "))
	}
	for _, r := range rollouts {
		if strings.HasSuffix(r.kind, "AdmissionPolicy") {
			fmt.Fprintf(out, "%s/%s in force\n", strings.ToLower(r.kind), r.name)
			continue
		}
		fmt.Fprintf(out, "%s/%s rolled out\n", strings.ToLower(r.kind), r.name)
	}
	if err := agentCoverage(ctx, client, rollouts, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "faultline is running (%s)\n", time.Since(start).Round(time.Second))
	return nil
}

// check reads the workload and its pods: ready, not yet (why), or failed (an error).
func (r *rollout) check(ctx context.Context, client kubernetes.Interface) error {
	var selector *metav1.LabelSelector
	var template corev1.PodSpec
	switch r.kind {
	case "Deployment":
		d, err := client.AppsV1().Deployments(r.namespace).Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("deployment %s/%s: %w", r.namespace, r.name, err)
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		s := d.Status
		r.ready = s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want
		r.why = fmt.Sprintf("%d of %d replicas of the current template available", min(s.UpdatedReplicas, s.AvailableReplicas), want)
		selector, template = d.Spec.Selector, d.Spec.Template.Spec
	case "DaemonSet":
		d, err := client.AppsV1().DaemonSets(r.namespace).Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("daemonset %s/%s: %w", r.namespace, r.name, err)
		}
		s := d.Status
		r.ready = s.ObservedGeneration >= d.Generation && s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled
		r.why = fmt.Sprintf("%d of %d nodes run the current template, available", min(s.UpdatedNumberScheduled, s.NumberAvailable), s.DesiredNumberScheduled)
		selector, template = d.Spec.Selector, d.Spec.Template.Spec
	case "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy":
		return r.checkPolicy(ctx, client)
	}
	if r.ready {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return err
	}
	pods, err := client.CoreV1().Pods(r.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return fmt.Errorf("the pods of %s %s/%s: %w", strings.ToLower(r.kind), r.namespace, r.name, err)
	}
	for _, p := range pods.Items {
		if !ofTemplate(&p, &template) {
			continue // a pod of the version before, which the rollout replaces
		}
		if why := podStuck(&p); why != "" {
			r.why += "; " + why
		}
		if err := podFailed(&p, r); err != nil {
			return err
		}
	}
	return nil
}

// checkPolicy reads an admission policy and its bindings: in force once a binding names it
// and (a ValidatingAdmissionPolicy) the API server has type-checked the generation applied;
// failed if no binding names it or its expressions do not type-check (the API server would
// then refuse or let through what the policy is meant to decide).
func (r *rollout) checkPolicy(ctx context.Context, client kubernetes.Interface) error {
	api := client.AdmissionregistrationV1()
	var bound []string
	if r.kind == "ValidatingAdmissionPolicy" {
		p, err := api.ValidatingAdmissionPolicies().Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("validatingadmissionpolicy %s: %w", r.name, err)
		}
		if p.Status.ObservedGeneration < p.Generation {
			r.why = "the API server has not checked its expressions yet"
			return nil
		}
		if tc := p.Status.TypeChecking; tc != nil && len(tc.ExpressionWarnings) > 0 {
			var warnings []string
			for _, w := range tc.ExpressionWarnings {
				warnings = append(warnings, w.FieldRef+": "+w.Warning)
			}
			return fmt.Errorf("validatingadmissionpolicy %s is installed but its expressions do not type-check against the API, so it cannot decide what it is for:\n  %s\n"+
				"Install a launcher of the cluster's version (launcher version; docs/deploy.md, supported versions)", r.name, strings.Join(warnings, "\n  "))
		}
		bindings, err := api.ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list the validatingadmissionpolicybindings: %w", err)
		}
		for _, b := range bindings.Items {
			bound = append(bound, b.Spec.PolicyName)
		}
	} else {
		bindings, err := api.MutatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list the mutatingadmissionpolicybindings: %w", err)
		}
		for _, b := range bindings.Items {
			bound = append(bound, b.Spec.PolicyName)
		}
	}
	if !slices.Contains(bound, r.name) {
		return fmt.Errorf("%s %s is installed but not in force: no %sBinding names it (kubectl get %sbindings); install the admission component again: launcher install --components admission",
			strings.ToLower(r.kind), r.name, r.kind, strings.ToLower(r.kind))
	}
	r.ready = true
	return nil
}

// podFailed is the error of a pod that cannot come up without a change: its image cannot be
// pulled, or its container crashes in a loop.
func podFailed(p *corev1.Pod, r *rollout) error {
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		where := fmt.Sprintf("pod %s/%s on node %s", p.Namespace, p.Name, p.Spec.NodeName)
		switch {
		case slices.Contains(imagePullFailures, w.Reason):
			return fmt.Errorf("%s %s/%s cannot start: its image %s cannot be pulled (%s, %s): %s\n"+
				"Push that image (make release REGISTRY=…), or name one the nodes can pull: --registry, or --%s",
				strings.ToLower(r.kind), r.namespace, r.name, imageOf(p, cs.Name), w.Reason, where, w.Message, imageFlag(r))
		case w.Reason == "CrashLoopBackOff":
			last := ""
			if t := cs.LastTerminationState.Terminated; t != nil {
				last = fmt.Sprintf(": it exited %d (%s) %s", t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
			}
			return fmt.Errorf("%s %s/%s cannot start: container %s of %s restarts in a loop%s\nSee its log: kubectl logs -n %s %s -c %s --previous",
				strings.ToLower(r.kind), r.namespace, r.name, cs.Name, where, last, p.Namespace, p.Name, cs.Name)
		}
	}
	return nil
}

// podStuck says why a pod is not running yet, where the API says: unscheduled, or waiting.
func podStuck(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return fmt.Sprintf("pod %s not scheduled: %s", p.Name, c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf("pod %s on %s: %s %s", p.Name, p.Spec.NodeName, w.Reason, w.Message)
		}
	}
	return ""
}

// ofTemplate: the pod runs the template's images (not those of a template before it).
func ofTemplate(p *corev1.Pod, t *corev1.PodSpec) bool {
	for _, c := range slices.Concat(t.InitContainers, t.Containers) {
		if imageOf(p, c.Name) != c.Image {
			return false
		}
	}
	return true
}

// imageOf is the image of container name of pod p, as the pod names it.
func imageOf(p *corev1.Pod, name string) string {
	for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		if c.Name == name {
			return c.Image
		}
	}
	return "?"
}

// imageFlag is install's flag of the workload's image.
func imageFlag(r *rollout) string {
	if r.kind == "DaemonSet" {
		return "agent-image"
	}
	return "controller-image"
}

// agentCoverage says which nodes run no node agent (the DaemonSet's tolerations or node
// selector leave them out): their GPUs' faults and shutdowns go unseen.
func agentCoverage(ctx context.Context, client kubernetes.Interface, rollouts []*rollout, out io.Writer) error {
	for _, r := range rollouts {
		if r.kind != "DaemonSet" {
			continue
		}
		d, err := client.AppsV1().DaemonSets(r.namespace).Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list the nodes, to say which run no agent: %w", err)
		}
		if missing := len(nodes.Items) - int(d.Status.DesiredNumberScheduled); missing > 0 {
			fmt.Fprintf(out, "note: %d of %d nodes run no %s (its tolerations and node selector leave them out): faultline sees no fault there\n",
				missing, len(nodes.Items), r.name)
		}
	}
	return nil
}
