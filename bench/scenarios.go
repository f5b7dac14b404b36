package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// Faults, the same for every system.
var (
	// appError is a program bug: it happens again in every attempt.
	appError = cluster.Failure{ExitCode: 1, Message: "ValueError: loss is NaN"}
	// sigterm is how a worker ends when the kubelet stops it for a node shutdown.
	sigterm = cluster.Failure{ExitCode: 143, Message: "terminated by SIGTERM"}
	// cudaError is how a worker ends when its GPU falls off the bus (XID 79): the CUDA
	// runtime reports an error and the program exits 1, like a bug would.
	cudaError = cluster.Failure{ExitCode: 1, Message: "RuntimeError: CUDA error: unspecified launch failure"}
	// watchdogAbort is how a worker hung in a collective ends when PyTorch's NCCL watchdog's
	// timeout runs out: it aborts the process (SIGABRT).
	watchdogAbort = cluster.Failure{ExitCode: 134, Message: "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1042, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."}
)

func byName(name string) fields.Selector { return fields.OneTermEqualSelector("metadata.name", name) }

// start creates a gang and waits until all n workers of its first generation are Running.
func (b *bench) start(ctx context.Context, s system, name string, n int) (map[int]*corev1.Pod, error) {
	if err := s.create(ctx, name, n); err != nil {
		return nil, fmt.Errorf("create %s %s: %w", s.name(), name, err)
	}
	pods, err := b.waitPods(ctx, s, name, generation(s, n, 0, nil))
	if err != nil {
		return nil, err
	}
	if sp, ok := s.(interface{ sparesOf(n int) int }); ok {
		// The spares are made once the gang runs: the fault comes once they all wait.
		if _, err := b.waitPods(ctx, s, name, func(ps []*corev1.Pod) (bool, error) {
			waiting := 0
			for _, p := range ps {
				if attempt.Spare(p) && cluster.PodRunning(p) {
					waiting++
				}
			}
			return waiting == sp.sparesOf(n), nil
		}); err != nil {
			return nil, err
		}
	}
	byIndex := map[int]*corev1.Pod{}
	for _, p := range pods {
		if cluster.PodRunning(p) && !attempt.Spare(p) {
			byIndex[attempt.IndexOrNone(p)] = p
		}
	}
	return byIndex, nil
}

// waitPods waits until cond holds for the gang's pods, read with their nodes' barrier
// records where s keeps them on the heartbeats.
func (b *bench) waitPods(ctx context.Context, s system, name string, cond func([]*corev1.Pod) (bool, error)) ([]*corev1.Pod, error) {
	switch in := s.(type) {
	case faultlineInPlace:
		if in.supervise {
			return b.c.WaitPodsWithRecords(ctx, namespace, s.selector(name), cond)
		}
	case faultlineSpares:
		return b.c.WaitPodsWithRecords(ctx, namespace, s.selector(name), cond)
	}
	return b.c.WaitPods(ctx, namespace, s.selector(name), cond)
}

// generation holds once n pods of the generation after restarts are Running, none of
// them one of the failed pods.
func generation(s system, n, restarts int, failed map[types.UID]bool) func([]*corev1.Pod) (bool, error) {
	return func(pods []*corev1.Pod) (bool, error) {
		running := 0
		for _, p := range pods {
			if cluster.PodRunning(p) && s.current(p, restarts) && !failed[p.UID] {
				running++
			}
		}
		return running == n, nil
	}
}

// finish deletes a gang and waits until none of its pods is left, so that the next
// measurement starts on an empty cluster and an idle Job controller. Cleaning up is not
// measured: rather than wait for the rate-limited garbage collector and Job controller
// (about 25 s for 256 pods at their default QPS), the bench deletes the pods itself and
// drops their finalizers, again for any pod a not yet deleted Job or JobSet still creates.
// The finalizers go before the gang's Jobs: a deleted Job's controller drops the tracking
// finalizer of every pod it still shows with one, on the client that creates the next
// measurement's pods, and at 2,048 pods that backlog outlived the cleanup (as in faultline's
// teardown: pkg/controller's retireJob).
func (b *bench) finish(ctx context.Context, s system, name string) error {
	var (
		handled = map[types.UID]bool{}
		g       errgroup.Group
	)
	g.SetLimit(32)
	pods, err := b.c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: s.selector(name).String()})
	if err != nil {
		return fmt.Errorf("list the pods of %s %s: %w", s.name(), name, err)
	}
	for _, p := range pods.Items {
		g.Go(func() error { return b.dropFinalizers(ctx, &p) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := s.remove(ctx, name); err != nil {
		return fmt.Errorf("delete %s %s: %w", s.name(), name, err)
	}
	_, err = b.c.WaitPods(ctx, namespace, s.selector(name), func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if handled[p.UID] {
				continue
			}
			handled[p.UID] = true
			g.Go(func() error { return b.release(ctx, p) })
		}
		return len(pods) == 0, nil
	})
	if err := errors.Join(err, g.Wait()); err != nil || !b.cfg.gpuQuota {
		return err
	}
	// The next measurement starts with the whole quota free, not with what the quota
	// controller has yet to give back.
	return waitQuota(ctx, b.c, func(used int64) bool { return used == 0 })
}

// release deletes a pod at once and drops its finalizers.
func (b *bench) release(ctx context.Context, p *corev1.Pod) error {
	if err := b.dropFinalizers(ctx, p); err != nil {
		return err
	}
	err := b.c.Client.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s: %w", p.Name, err)
	}
	return nil
}

// dropFinalizers drops every finalizer of a pod: the bench's pods have no other owner that
// needs one once their measurement is over.
func (b *bench) dropFinalizers(ctx context.Context, p *corev1.Pod) error {
	if len(p.Finalizers) == 0 {
		return nil
	}
	_, err := b.c.Client.CoreV1().Pods(namespace).Patch(ctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("drop finalizers of pod %s: %w", p.Name, err)
	}
	return nil
}

// floor: a bare Indexed Job of n pods, from create to every pod Running.
func (b *bench) floor(ctx context.Context, n, round int) error {
	name := fmt.Sprintf("floor-%d-%d", n, round)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Completions:    ptr.To(int32(n)), Parallelism: ptr.To(int32(n)),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{labelGang: name}}, Spec: gpuWorker()},
		},
	}
	before, err := b.apiWrites(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := b.c.Client.BatchV1().Jobs(namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return err
	}
	s := bareJob{c: b.c}
	if _, err := b.c.WaitPods(ctx, namespace, s.selector(name), generation(s, n, 0, nil)); err != nil {
		return err
	}
	d := time.Since(start)
	after, err := b.apiWrites(ctx)
	if err != nil {
		return err
	}
	b.results.add(sample{system: scenarioFloor, workers: n, scenario: scenarioFloor, d: d, writes: after.since(before)})
	return b.finish(ctx, s, name)
}

// timeToFail (scenario a): index 2 has a bug that crashes it whenever it runs. Measured: until
// the system declares the gang failed, until its last pod is gone (when a queue such as
// Kueue can admit the next workload), and how many generations it started in vain.
func (b *bench) timeToFail(ctx context.Context, s system, n, round int) error {
	name := gangName(scenarioFail, s, n, round)
	pods, err := b.start(ctx, s, name, n)
	if err != nil {
		return err
	}
	initial := map[types.UID]bool{}
	for _, p := range pods {
		initial[p.UID] = true
	}
	stop := b.crashLoop(ctx, s.selector(name), min(2, n-1), initial)
	start := time.Now()
	if _, err := waitOwner(ctx, s, name, s.failed); err != nil {
		stop()
		return err
	}
	failed := time.Since(start)
	if _, err := b.c.WaitPods(ctx, namespace, s.selector(name), func(p []*corev1.Pod) (bool, error) {
		return !slices.ContainsFunc(p, cluster.PodLive), nil
	}); err != nil {
		stop()
		return err
	}
	gone := time.Since(start)
	crashes, fresh := stop()
	b.results.add(sample{system: s.name(), workers: n, scenario: scenarioFail, d: failed, extra: gone,
		wasted: (fresh + n - 1) / n, crashes: crashes})
	return b.finish(ctx, s, name)
}

// crashLoop fails the pod of one index each time one runs: the bug is in the program, so
// every attempt crashes the same way. Its stop function returns how many crashes it caused
// and how many pods of the gang were created after it began (the generations started in vain).
func (b *bench) crashLoop(ctx context.Context, sel labels.Selector, idx int, initial map[types.UID]bool) (stop func() (crashes, created int)) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	failed := map[types.UID]bool{}
	fresh := map[types.UID]bool{}
	go func() {
		defer close(done)
		_, _ = b.c.WaitPods(ctx, namespace, sel, func(pods []*corev1.Pod) (bool, error) {
			for _, p := range pods {
				if !initial[p.UID] {
					fresh[p.UID] = true
				}
				if attempt.IndexOrNone(p) == idx && cluster.PodRunning(p) && !failed[p.UID] {
					failed[p.UID] = true
					if err := b.c.FailPod(ctx, namespace, p.Name, appError); err != nil {
						delete(failed, p.UID) // tried again on the pod's next change
					}
				}
			}
			return false, nil
		})
	}()
	return func() (int, int) { cancel(); <-done; return len(failed), len(fresh) }
}

// timeToRestart (scenarios b and c): a fault hits one node; measured until every worker of
// the next generation is Running, or until the system gives up on the gang instead.
func (b *bench) timeToRestart(ctx context.Context, s system, scenario string, n, round int) error {
	name := gangName(scenario, s, n, round)
	pods, err := b.start(ctx, s, name, n)
	if err != nil {
		return err
	}
	node := pods[0].Spec.NodeName
	if isFaultline(s) {
		// Not part of the restart: the node's agent is up (it runs there all along), and
		// the XID's GPU is the gang's (see onlyGangOn).
		if _, err := b.agentOn(ctx, node); err != nil {
			return err
		}
		if scenario == scenarioXID || scenario == scenarioHung {
			if err := b.onlyGangOn(ctx, node, pods); err != nil {
				return err
			}
		}
	}
	before, err := b.apiWrites(ctx)
	if err != nil {
		return err
	}
	var work0 workReading
	if isFaultline(s) {
		if work0, err = b.readWork(ctx); err != nil {
			return err
		}
	}
	start := time.Now()
	var victims []*corev1.Pod
	var waited time.Duration // a framework's timeout the system would wait for, added
	switch scenario {
	case scenarioShutdown:
		victims, err = b.shutdown(ctx, s, node, pods)
	case scenarioXID:
		victims, err = b.xid(ctx, s, node, pods)
	case scenarioHung:
		victims, waited, err = b.hung(ctx, s, node, pods)
	}
	if err != nil {
		return err
	}
	failed := map[types.UID]bool{}
	for _, v := range victims {
		failed[v.UID] = true
	}
	restarted, err := b.restartedOrFailed(ctx, s, name, n, failed)
	if err != nil {
		return err
	}
	d := time.Since(start) + waited
	after, err := b.apiWrites(ctx)
	if err != nil {
		return err
	}
	smp := sample{system: s.name(), workers: n, scenario: scenario, d: d, waited: waited, gaveUp: !restarted, writes: after.since(before)}
	if isFaultline(s) {
		work1, err := b.readWork(ctx)
		if err != nil {
			return err
		}
		smp.work = work1.since(work0)
	}
	if restarted && isFaultline(s) {
		// The run's own account of the restart, once it has recorded the Running attempt.
		run, err := waitOwner(ctx, s, name, func(o runtime.Object) bool {
			r, ok := o.(*v1alpha1.TrainingRun)
			return ok && r.Status.Attempt == 2 && r.Status.Phase == v1alpha1.PhaseRunning && r.Status.Trace != nil && r.Status.Trace.RunningAt != nil
		})
		if err != nil {
			return err
		}
		tr := run.(*v1alpha1.TrainingRun).Status.Trace
		smp.phases = phasesOf(tr)
		// The schedule phase is two controllers' work: the Job controller creating the
		// pods, the scheduler binding them. The pods' own timestamps split it.
		sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: name, v1alpha1.LabelAttempt: "2"})
		list, err := b.c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return err
		}
		if tr.CreatedAt != nil {
			smp.firstPodCreated, smp.podsCreated, smp.podsBound = podsProgress(list.Items, tr.CreatedAt.Time)
			smp.podTimes = true
		}
	}
	b.results.add(smp)
	if err := b.finish(ctx, s, name); err != nil {
		return err
	}
	return b.resetNode(ctx, node)
}

// shutdown: logind announces a shutdown of node. faultline's agent marks the node's
// workers; then, for every system alike, the kubelet's graceful shutdown puts its
// DisruptionTarget condition on them and stops them (exit 143).
func (b *bench) shutdown(ctx context.Context, s system, node string, pods map[int]*corev1.Pod) ([]*corev1.Pod, error) {
	var victims []*corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName == node {
			victims = append(victims, p)
		}
	}
	if isFaultline(s) {
		a, err := b.agentOn(ctx, node)
		if err != nil {
			return nil, err
		}
		if err := a.Logind.PrepareForShutdown(true); err != nil {
			return nil, err
		}
		if err := b.waitMarked(ctx, s, victims); err != nil {
			return nil, err
		}
	}
	// The kubelet stops the node's pods all at once. A system that restarts the gang on the
	// first one may delete the others first: a pod already gone has nothing left to stop.
	var g errgroup.Group
	for _, p := range victims {
		g.Go(func() error {
			if err := b.disrupt(ctx, p); err != nil {
				return ignoreNotFound(err)
			}
			return ignoreNotFound(b.c.FailPod(ctx, namespace, p.Name, sigterm))
		})
	}
	return victims, g.Wait()
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// xid: GPU 0 of node falls off the bus (XID 79). Its worker's CUDA calls fail and it exits
// 1. faultline's agent sees the XID first and marks the worker; the other systems see only
// the exit code.
func (b *bench) xid(ctx context.Context, s system, node string, pods map[int]*corev1.Pod) ([]*corev1.Pod, error) {
	victim := pods[0]
	if isFaultline(s) {
		var err error
		if victim, err = b.injectXID79(ctx, node); err != nil {
			return nil, err
		}
	}
	return []*corev1.Pod{victim}, b.c.FailPod(ctx, namespace, victim.Name, cudaError)
}

// injectXID79 makes GPU 0 of node fall off the bus, and returns the worker the node's agent
// marked for it.
func (b *bench) injectXID79(ctx context.Context, node string) (*corev1.Pod, error) {
	a, err := b.agentOn(ctx, node)
	if err != nil {
		return nil, err
	}
	if err := a.InjectXID(0, 79); err != nil {
		return nil, err
	}
	// The agent hands GPU 0 to the node's oldest worker, as a device plugin would.
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	markedHere := func(p *corev1.Pod) bool { return p.Spec.NodeName == node && infraMarked(p) }
	pods, err := b.c.WaitPods(mctx, namespace, labels.Everything(), func(p []*corev1.Pod) (bool, error) {
		return slices.ContainsFunc(p, markedHere), nil
	})
	if err != nil {
		return nil, fmt.Errorf("the agent on %s marked no worker after XID 79 on GPU 0: %w (agent log %s)", node, err, a.LogPath)
	}
	return pods[slices.IndexFunc(pods, markedHere)], nil
}

// hung: GPU 0 of node falls off the bus (XID 79) and its worker hangs in a CUDA call, its
// peers in the collective with it: no worker exits (issue 42). faultline's agent marks the
// worker, and faultline ends the attempt on that evidence: nothing else happens to the pods.
// The other systems see nothing until the framework's own timeout ends a process (PyTorch's
// NCCL watchdog aborts it): the bench does not wait that long, it ends the victim at once as
// the watchdog does and returns the configured timeout, which the measurement adds.
func (b *bench) hung(ctx context.Context, s system, node string, pods map[int]*corev1.Pod) ([]*corev1.Pod, time.Duration, error) {
	if isFaultline(s) {
		victim, err := b.injectXID79(ctx, node)
		return []*corev1.Pod{victim}, 0, err
	}
	victim := pods[0]
	return []*corev1.Pod{victim}, b.cfg.hangTimeout, b.c.FailPod(ctx, namespace, victim.Name, watchdogAbort)
}

// onlyGangOn waits until the gang's pods are the only ones on node. The agent hands GPU 0 to
// the node's oldest worker, and the previous system's controllers may have made a pod after
// the bench removed that system's gang (a child Job's replacement, until the garbage
// collector deletes the Job): that pod would take the XID meant for the gang.
func (b *bench) onlyGangOn(ctx context.Context, node string, gang map[int]*corev1.Pod) error {
	ours := map[types.UID]bool{}
	for _, p := range gang {
		ours[p.UID] = true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	others, err := b.c.WaitPods(ctx, namespace, labels.Everything(), func(pods []*corev1.Pod) (bool, error) {
		return !slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return p.Spec.NodeName == node && !ours[p.UID] }), nil
	})
	if err != nil {
		return fmt.Errorf("pods of other gangs still on node %s: %w (%d pods in the namespace)", node, err, len(others))
	}
	return nil
}

func infraMarked(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1alpha1.PodConditionInfrastructureFault && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// waitMarked waits until the agent has marked every victim.
func (b *bench) waitMarked(ctx context.Context, s system, victims []*corev1.Pod) error {
	want := map[types.UID]bool{}
	for _, v := range victims {
		want[v.UID] = true
	}
	_, err := b.c.WaitPods(ctx, namespace, labels.Everything(), func(p []*corev1.Pod) (bool, error) {
		marked := 0
		for _, pod := range p {
			if want[pod.UID] && infraMarked(pod) {
				marked++
			}
		}
		return marked == len(want), nil
	})
	return err
}

// disrupt puts the condition the kubelet sets on a pod it stops for a node shutdown.
func (b *bench) disrupt(ctx context.Context, p *corev1.Pod) error {
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet",
		Message: "Pod was terminated in response to imminent node shutdown.", LastTransitionTime: metav1.Now(),
	}}}})
	_, err := b.c.Client.CoreV1().Pods(namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// restartedOrFailed waits until the next generation of the gang is all Running (true), or
// the system has failed the gang instead of restarting it (false).
func (b *bench) restartedOrFailed(ctx context.Context, s system, name string, n int, failed map[types.UID]bool) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		restarted bool
		err       error
	}
	done := make(chan result, 2)
	go func() {
		_, err := b.waitPods(ctx, s, name, generation(s, n, 1, failed))
		done <- result{true, err}
	}()
	go func() {
		_, err := waitOwner(ctx, s, name, s.failed)
		done <- result{false, err}
	}()
	r := <-done
	if r.err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return false, ctx.Err()
	}
	return r.restarted, r.err
}

// resetNode brings a node back after a fault: its shutdown announcement and GPU health
// condition go, so that later measurements are not judged by them.
func (b *bench) resetNode(ctx context.Context, node string) error {
	if a, ok := b.agents[node]; ok {
		a.Stop()
		delete(b.agents, node)
		if b.cfg.inPlace() {
			// The stopped agent's heartbeat and readiness were its own: the node goes back to
			// the simulated agent's, or a later in-place restart finds the node's agent
			// silent and moves its pods at once.
			if err := b.c.MakeInPlaceCapable(ctx, node); err != nil {
				return err
			}
		}
	}
	if _, err := b.c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AnnotationShutdownDetectedAt+`":null}}}`), metav1.PatchOptions{}); err != nil {
		return err
	}
	nd, err := b.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	kept := slices.DeleteFunc(slices.Clone(nd.Status.Conditions), func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeConditionType(v1alpha1.NodeConditionGPUHealthy)
	})
	if len(kept) == len(nd.Status.Conditions) {
		return nil
	}
	nd.Status.Conditions = kept
	_, err = b.c.Client.CoreV1().Nodes().UpdateStatus(ctx, nd, metav1.UpdateOptions{})
	return err
}

// gangName is unique per scenario, system, size and round.
func gangName(scenario string, s system, n, round int) string {
	short, ok := shortScenario[scenario]
	if !ok {
		panic(fmt.Sprintf("bench: no gang name for scenario %q", scenario)) // a scenario flag, not its name
	}
	return fmt.Sprintf("%s-%s-%d-%d", short, slug(s.name()), n, round)
}

// slug makes a system's name fit an object's or a file's name: "faultline (in place)" →
// "faultline-inplace".
func slug(name string) string {
	return strings.NewReplacer(" ", "", "(", "-", ")", "").Replace(strings.ToLower(name))
}

var shortScenario = map[string]string{scenarioFail: "fail", scenarioShutdown: "shutdown", scenarioXID: "xid", scenarioHung: "hung"}

// podsProgress is when, after since (the Job's creation), the first and the last of pods
// were created, and the last was bound to a node. All are the API server's timestamps, to
// the second.
func podsProgress(pods []corev1.Pod, since time.Time) (first, last, bound time.Duration) {
	since = since.Truncate(time.Second) // as precise as the pods' times, no more
	for i, p := range pods {
		created := p.CreationTimestamp.Sub(since)
		if i == 0 || created < first {
			first = created
		}
		last = max(last, created)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
				bound = max(bound, c.LastTransitionTime.Sub(since))
			}
		}
	}
	return first, last, bound
}
