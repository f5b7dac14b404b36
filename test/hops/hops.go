// Package hops breaks a restart in place down by hop, per pod, from the spans a collector
// got: the restart's trace (the controller's phases, the node agents' steps on each pod) and
// the kubelets' syncs of the same pods with their CRI calls (joined on k8s.pod.uid; the
// kubelet's traces are its own, as no trace context reaches it). What it prints is in
// docs/benchmarks.md, "Where a restart in place spends its time".
package hops

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
	"github.com/faultline-dev/faultline/pkg/tracing"
	"github.com/faultline-dev/faultline/test/otlp"
)

// The kubelet's span of a pod's sync (with the pod's tracing.KeyPodUID, as the agent's
// steps), and the suffixes of its CRI calls' spans (otelgrpc names them
// runtime.v1.RuntimeService/<Method>), children of the sync.
const (
	kubeletSync = "syncPod"
	criRemove   = "/RemoveContainer"
	criStart    = "/StartContainer"
	criSandbox  = "/RunPodSandbox"
	criStop     = "/StopContainer"
	criStopPod  = "/StopPodSandbox"
)

// Pod is one worker pod of the new attempt: InPlace when it is an old pod restarted in place,
// else a new pod (a moved index); InWorker when its barrier is its worker container's
// entrypoint (attempt.BarrierInWorker), else an init container.
type Pod struct {
	UID, Name         string
	InPlace, InWorker bool
	// Spare: a moved index that a warm spare took (spec.spares), whose barrier waited long
	// before the restart: no creation, scheduling or start of the kubelet's is its.
	Spare bool
	// API: a moved index's moments as a watch of the API saw them (zero for a pod restarted
	// in place, or where no watch ran).
	API APIMoments
	// OldUID: a moved index's old pod, whose end on the node shutting down its kubelet's
	// spans show (OldKilled, OldSandboxStopped).
	OldUID string
}

// APIMoments are a moved index's way to its new pod through the API, each moment when the
// caller's watch saw it (its clock, the collector's): the old pod's worker's exit reported
// by its node agent, its sandbox stopped (the agent's podStoppedAt, its clock) and that stop
// written on the pod, the old pod gone, its new pod made and bound to a node.
type APIMoments struct {
	OldExitReported, OldStopped, OldStopWritten, OldGone, Made, Bound time.Time
	// Handed: a spare's hand-over of the index (its index label seen).
	Handed time.Time
}

// PodTimes are the moments of one pod's way back, zero when not seen.
type PodTimes struct {
	Pod
	// StopBegan, Stopped: the agent's stop of the old workers (its first inplace.stop), and
	// how it reached a supervised worker (tracing.KeyBarrierSignal: socket, or runtime where
	// the socket was out of reach, with why).
	StopBegan, Stopped  time.Time
	StopVia, StopReason string
	// Removed: the kubelet's last removal of an old container of the pod.
	Removed time.Time
	// Synced, SandboxReady (a new pod): the kubelet's first sync of the pod (it reached its
	// node), and the end of its RunPodSandbox (the pod's network and cgroup are there).
	Synced, SandboxReady time.Time
	// BarrierStarting, BarrierStarted: the kubelet's start of the barrier (its first
	// StartContainer after the removal; a new pod's first), the call's beginning and end. The
	// runtime tells the agent the barrier runs before the call returns to the kubelet.
	BarrierStarting, BarrierStarted time.Time
	// OpenBegan, Opened: the agent's opening of the barrier (inplace.open, its confirmation
	// included), and how its go signal went (tracing.KeyBarrierSignal: socket or exec).
	OpenBegan, Opened time.Time
	OpenVia           string
	// OldKillBegan, OldKilled, OldSandboxStopped (a moved index): its old pod's end at the
	// kubelet of the node shutting down, the first StopContainer's beginning, the last's
	// end, and the end of its StopPodSandbox.
	OldKillBegan, OldKilled, OldSandboxStopped time.Time
	// WorkerStarted: the kubelet's start of the worker (its first StartContainer after the
	// opening); with the barrier in the worker's container, the open's end: the barrier
	// answers the open and starts the worker as its child, in the container already started.
	WorkerStarted time.Time
}

// Episode is the controller's side of the restart: decided, barrier opened (its teardown's
// end, in place), every worker Running (its running's end).
type Episode struct {
	TraceID                       string
	Decided, BarrierOpen, Running time.Time
	Pods                          []PodTimes
}

// Breakdown reads the restart whose trace is traceID out of spans for pods.
func Breakdown(spans []otlp.Span, traceID string, pods []Pod) (Episode, error) {
	ep := Episode{TraceID: traceID}
	for _, s := range spans {
		if s.TraceID() != traceID || s.Service != tracing.ServiceController {
			continue
		}
		switch s.Name {
		case tracing.SpanClassify:
			ep.Decided = s.End()
		case tracing.SpanTeardown:
			ep.BarrierOpen = s.End()
		case tracing.SpanRunning:
			ep.Running = s.End()
		}
	}
	if ep.Decided.IsZero() || ep.BarrierOpen.IsZero() || ep.Running.IsZero() {
		return ep, fmt.Errorf("trace %s: the controller's classify, teardown or running span is missing", traceID)
	}
	// One pass, by pod UID: the kubelet's syncs, the agents' steps; and every span's children.
	syncs, steps := map[string][]otlp.Span{}, map[string][]otlp.Span{}
	children := map[string][]otlp.Span{}
	// ends: the kubelet's spans of each pod that are not its syncs (its termination's).
	ends := map[string][]otlp.Span{}
	for _, s := range spans {
		uid := s.Attr(string(tracing.KeyPodUID))
		switch {
		case s.Name == kubeletSync && uid != "":
			syncs[uid] = append(syncs[uid], s)
		case s.Service != tracing.ServiceAgent && s.Service != tracing.ServiceController && uid != "":
			ends[uid] = append(ends[uid], s)
		case s.Service == tracing.ServiceAgent && s.TraceID() == traceID && uid != "":
			steps[uid] = append(steps[uid], s)
		}
		if len(s.ParentSpanId) > 0 {
			children[s.Parent()] = append(children[s.Parent()], s)
		}
	}
	for _, p := range pods {
		t := PodTimes{Pod: p}
		for _, s := range steps[p.UID] {
			switch s.Name {
			case tracing.SpanInPlaceStop:
				// The first: a pod stays in flight while its stop runs, so a later stop
				// began after it ended, queued again while the pod's status lagged, and
				// found the old workers gone (the kubelet restarting the pod already).
				if t.StopBegan.IsZero() || s.Start().Before(t.StopBegan) {
					t.StopBegan, t.Stopped = s.Start(), s.End()
					t.StopVia, t.StopReason = s.Attr(string(tracing.KeyBarrierSignal)), s.Attr(string(tracing.KeyBarrierSignalReason))
				}
			case tracing.SpanInPlaceOpen:
				// The open that gave the go signal (it says how), else the first: a pod
				// queued again while its status lags is opened again, and finds nothing.
				via := s.Attr(string(tracing.KeyBarrierSignal))
				if t.OpenBegan.IsZero() || t.OpenVia == "" && (via != "" || s.Start().Before(t.OpenBegan)) {
					t.OpenBegan, t.Opened, t.OpenVia = s.Start(), s.End(), via
				}
			}
		}
		var calls []otlp.Span
		for _, sync := range syncs[p.UID] {
			calls = append(calls, children[sync.ID()]...)
		}
		slices.SortFunc(calls, func(a, b otlp.Span) int { return a.End().Compare(b.End()) })
		switch {
		case p.Spare:
			// Its barrier waited since long before: it is the index's pod, to be opened, once
			// handed the index.
			t.BarrierStarting, t.BarrierStarted = p.API.Handed, p.API.Handed
		case !p.InPlace:
			for _, sync := range syncs[p.UID] {
				if t.Synced.IsZero() || sync.Start().Before(t.Synced) {
					t.Synced = sync.Start()
				}
			}
			_, t.SandboxReady = firstAfter(calls, criSandbox, ep.Decided)
			t.BarrierStarting, t.BarrierStarted = firstAfter(calls, criStart, ep.Decided)
		case t.InPlace && t.StopVia == inplace.ViaSocket:
			// A worker stopped through its barrier's socket: the barrier waits again, in
			// the container that ran it, once it answered the stop. No removal and no start
			// of the kubelet's is a step of this restart (one after it is the kubelet's
			// garbage collection of an older container).
			t.BarrierStarting, t.BarrierStarted = t.Stopped, t.Stopped
		case !t.Stopped.IsZero():
			// The old containers removed, then the first start: the barrier's. From the
			// stop's beginning: the kubelet may see the exit, and remove, before the
			// runtime's answer to the agent's stop.
			for _, c := range calls {
				if !c.End().After(t.StopBegan) {
					continue
				}
				if strings.HasSuffix(c.Name, criRemove) {
					t.Removed = c.End()
				}
				if strings.HasSuffix(c.Name, criStart) {
					t.BarrierStarting, t.BarrierStarted = c.Start(), c.End()
					break
				}
			}
		}
		switch {
		case p.InWorker:
			t.WorkerStarted = t.Opened
		case !t.OpenBegan.IsZero() && !t.BarrierStarted.IsZero():
			// After the open began (the barrier exits before the open returns, and the
			// kubelet may start the worker meanwhile) and after the barrier's own start (the
			// open may begin before that call returns).
			_, t.WorkerStarted = firstAfter(calls, criStart, laterTime(t.OpenBegan, t.BarrierStarted))
		}
		if p.OldUID != "" {
			var calls []otlp.Span
			for _, sp := range append(ends[p.OldUID], syncs[p.OldUID]...) {
				calls = append(calls, children[sp.ID()]...)
			}
			for _, c := range calls {
				switch {
				case strings.HasSuffix(c.Name, criStop):
					if t.OldKillBegan.IsZero() || c.Start().Before(t.OldKillBegan) {
						t.OldKillBegan = c.Start()
					}
					t.OldKilled = laterTime(t.OldKilled, c.End())
				case strings.HasSuffix(c.Name, criStopPod) && t.OldSandboxStopped.IsZero():
					t.OldSandboxStopped = c.End()
				}
			}
		}
		ep.Pods = append(ep.Pods, t)
	}
	return ep, nil
}

// Complete: every moment of every pod was seen (a restart whose new pods all ran).
func (ep Episode) Complete() bool {
	for _, t := range ep.Pods {
		// A worker stopped through its barrier's socket waits again in the container that
		// ran it: no removal of the kubelet's.
		kept := t.InPlace && t.StopVia == inplace.ViaSocket
		if t.BarrierStarted.IsZero() || t.Opened.IsZero() || t.WorkerStarted.IsZero() || t.InPlace && (t.Stopped.IsZero() || !kept && t.Removed.IsZero()) {
			return false
		}
	}
	return len(ep.Pods) > 0
}

// firstAfter is when the first call named …suffix that ends after t began and ended (zero
// if none).
func firstAfter(calls []otlp.Span, suffix string, t time.Time) (start, end time.Time) {
	for _, c := range calls {
		if strings.HasSuffix(c.Name, suffix) && c.End().After(t) {
			return c.Start(), c.End()
		}
	}
	return time.Time{}, time.Time{}
}

func laterTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Hop is one step of a pod's way back: who spends it, and its length for a pod (false when
// the pod has no such hop, or a moment of it was not seen).
type Hop struct {
	Name, Who string
	Of        func(Episode, PodTimes) (time.Duration, bool)
}

// between is the hop from a to b, seen when both were.
func between(a, b func(Episode, PodTimes) time.Time) func(Episode, PodTimes) (time.Duration, bool) {
	return func(ep Episode, t PodTimes) (time.Duration, bool) {
		from, to := a(ep, t), b(ep, t)
		return to.Sub(from), !from.IsZero() && !to.IsZero()
	}
}

// of is hop, counted only for the pods that keep selects.
func of(keep func(PodTimes) bool, hop func(Episode, PodTimes) (time.Duration, bool)) func(Episode, PodTimes) (time.Duration, bool) {
	return func(ep Episode, t PodTimes) (time.Duration, bool) {
		d, ok := hop(ep, t)
		return d, ok && keep(t)
	}
}

// The pods a hop is of: restarted in place, new (a moved index), and those whose barrier is
// an init container (one in the worker's container starts the worker as its open ends).
var (
	inPlace = func(t PodTimes) bool { return t.InPlace }
	newPod  = func(t PodTimes) bool { return !t.InPlace && !t.Spare }
	// moved: a moved index, on a new pod or a spare; spare: on a spare.
	moved       = func(t PodTimes) bool { return !t.InPlace }
	spare       = func(t PodTimes) bool { return t.Spare }
	initBarrier = func(t PodTimes) bool { return !t.InWorker }
	// stoppedBySocket: a worker its barrier stopped and waits again (it supervises it).
	stoppedBySocket = func(t PodTimes) bool { return t.InPlace && t.StopVia == inplace.ViaSocket }
)

var (
	decided        = func(ep Episode, _ PodTimes) time.Time { return ep.Decided }
	barrierOpen    = func(ep Episode, _ PodTimes) time.Time { return ep.BarrierOpen }
	running        = func(ep Episode, _ PodTimes) time.Time { return ep.Running }
	stopBegan      = func(_ Episode, t PodTimes) time.Time { return t.StopBegan }
	stopped        = func(_ Episode, t PodTimes) time.Time { return t.Stopped }
	removed        = func(_ Episode, t PodTimes) time.Time { return t.Removed }
	synced         = func(_ Episode, t PodTimes) time.Time { return t.Synced }
	sandboxReady   = func(_ Episode, t PodTimes) time.Time { return t.SandboxReady }
	barrierStarted = func(_ Episode, t PodTimes) time.Time { return t.BarrierStarted }
	openBegan      = func(_ Episode, t PodTimes) time.Time { return t.OpenBegan }
	opened         = func(_ Episode, t PodTimes) time.Time { return t.Opened }
	workerStarted  = func(_ Episode, t PodTimes) time.Time { return t.WorkerStarted }
	oldExit        = func(_ Episode, t PodTimes) time.Time { return t.API.OldExitReported }
	oldKillBegan   = func(_ Episode, t PodTimes) time.Time { return t.OldKillBegan }
	oldKilled      = func(_ Episode, t PodTimes) time.Time { return t.OldKilled }
	oldSandbox     = func(_ Episode, t PodTimes) time.Time { return t.OldSandboxStopped }
	oldStopped     = func(_ Episode, t PodTimes) time.Time { return t.API.OldStopped }
	oldStopWritten = func(_ Episode, t PodTimes) time.Time { return t.API.OldStopWritten }
	oldGone        = func(_ Episode, t PodTimes) time.Time { return t.API.OldGone }
	made           = func(_ Episode, t PodTimes) time.Time { return t.API.Made }
	bound          = func(_ Episode, t PodTimes) time.Time { return t.API.Bound }
	handed         = func(_ Episode, t PodTimes) time.Time { return t.API.Handed }
)

// Hops are a restart in place's hops, in order. The gang's barrier opens once no old
// worker runs (inplacegate.Stopped): before a pod's barrier container has started, maybe; the
// agent opens a pod's barrier once both are so, the barrier's start as the kubelet's status
// write shows it.
var Hops = []Hop{
	{"decision → the agent stops the old workers", "API (run status write, the agent's watch)", of(inPlace, between(decided, stopBegan))},
	{"the agent's stop (SIGTERM to exit)", "runtime, worker", of(inPlace, between(stopBegan, stopped))},
	{"exit → the kubelet removed the old containers", "kubelet (relist, kill, remove)", of(inPlace, between(stopped, removed))},
	{"removed → the gang's barrier open", "kubelet status write, controller (every pod), API", of(inPlace, between(removed, barrierOpen))},
	{"removed → barrier started", "kubelet (create, start)", of(inPlace, between(removed, barrierStarted))},
	{"stopped by its barrier → the gang's barrier open", "the agent's record of the stop, controller (every pod), API", of(stoppedBySocket, between(stopped, barrierOpen))},
	{"decision → a moved index's barrier started (new pod)", "faultline, API, scheduler, kubelet (the three hops below)", of(newPod, between(decided, barrierStarted))},
	{"decision → the new pod at its kubelet", "faultline (creates it), scheduler, API (the kubelet's watch)", of(newPod, between(decided, synced))},
	{"decision → a moved index handed to a spare", "faultline (the old pod gone, the index's address, the patch), API", of(spare, between(decided, handed))},
	{"·· decision → the old pod's exit reported", "the node shutting down: its kubelet's kill, its agent's report", of(moved, between(decided, oldExit))},
	{"·· decision → the old pod's kill began", "the node shutting down: its kubelet", of(moved, between(decided, oldKillBegan))},
	{"·· kill began → its containers stopped", "its kubelet (StopContainer), the runtime, the worker", of(moved, between(oldKillBegan, oldKilled))},
	{"·· containers stopped → its sandbox stopped", "its kubelet (StopPodSandbox), the runtime, CNI", of(moved, between(oldKilled, oldSandbox))},
	{"·· decision → the old pod's sandbox stopped", "the node shutting down: its kubelet's kill", of(moved, between(decided, oldStopped))},
	{"·· sandbox stopped → the stop on the old pod", "its node agent (the runtime's event, a patch), API", of(moved, between(oldStopped, oldStopWritten))},
	{"·· the stop on the old pod → the old pod gone", "controller (its watch, the removal), API", of(moved, between(oldStopWritten, oldGone))},
	{"·· the old pod gone → the new pod made", "Job controller (its watch, the creation), API", of(newPod, between(oldGone, made))},
	{"·· the old pod gone → handed to a spare", "controller (its watch, the address, the patch), API", of(spare, between(oldGone, handed))},
	{"·· made → bound", "scheduler, API", of(newPod, between(made, bound))},
	{"·· bound → at its kubelet", "API (the kubelet's watch), kubelet", of(newPod, between(bound, synced))},
	{"at its kubelet → its sandbox ready", "kubelet, runtime (sandbox, network)", of(newPod, between(synced, sandboxReady))},
	{"sandbox → its barrier started", "kubelet (create, start)", of(newPod, between(sandboxReady, barrierStarted))},
	{"barrier open and started → the agent opens", "kubelet (relist, status write), the agent's watches", between(laterOf(barrierOpen, barrierStarted), openBegan)},
	{"the agent's open (confirmation, go signal)", "API (a read; in the worker, the record's write and a read after it), the barrier's socket (or an exec)", between(openBegan, opened)},
	{"opened → worker started (init container)", "kubelet (relist, create, start)", of(initBarrier, between(opened, workerStarted))},
	{"worker started → the gang Running", "kubelet status write, controller, API", between(workerStarted, running)},
}

// laterOf is the later of two moments (zero when either is).
func laterOf(a, b func(Episode, PodTimes) time.Time) func(Episode, PodTimes) time.Time {
	return func(ep Episode, t PodTimes) time.Time {
		x, y := a(ep, t), b(ep, t)
		if x.IsZero() || y.IsZero() {
			return time.Time{}
		}
		return laterTime(x, y)
	}
}

// Stat is a hop's median and worst over the pods that have it.
type Stat struct {
	Hop
	Pods          int
	Median, Worst time.Duration
}

// Stats are the hops' stats over ep's pods.
func Stats(ep Episode) []Stat {
	var out []Stat
	for _, h := range Hops {
		var ds []time.Duration
		for _, t := range ep.Pods {
			if d, ok := h.Of(ep, t); ok {
				ds = append(ds, d)
			}
		}
		st := Stat{Hop: h, Pods: len(ds)}
		if len(ds) > 0 {
			slices.Sort(ds)
			st.Median, st.Worst = ds[len(ds)/2], ds[len(ds)-1]
		}
		out = append(out, st)
	}
	return out
}

// Table is ep's hops as a Markdown table, with the episode's totals under it; a hop no pod
// has (the mode has no such step, or no watch saw it) is left out.
func Table(ep Episode) string {
	var b strings.Builder
	b.WriteString("| hop | who | pods | median | worst |\n| --- | --- | ---: | ---: | ---: |\n")
	for _, st := range Stats(ep) {
		if st.Pods == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s |\n", st.Name, st.Who, st.Pods, round(st.Median), round(st.Worst))
	}
	fmt.Fprintf(&b, "\ndecision → barrier open %s, → every worker Running %s\n", round(ep.BarrierOpen.Sub(ep.Decided)), round(ep.Running.Sub(ep.Decided)))
	if n, why := stoppedByRuntime(ep); n > 0 {
		fmt.Fprintf(&b, "%d supervised workers stopped through the runtime, their barriers' sockets out of reach (the first: %s)\n", n, why)
	}
	return b.String()
}

// stoppedByRuntime counts ep's supervised workers that the agent stopped through the
// runtime, not their barriers' sockets (a container restart the restart need not have
// made), and says why for the first.
func stoppedByRuntime(ep Episode) (n int, why string) {
	for _, t := range ep.Pods {
		if t.StopVia == inplace.ViaRuntime {
			if n == 0 {
				why = t.StopReason
			}
			n++
		}
	}
	return n, why
}

func round(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
