// Package inplace is the node agent's half of a gang restart in place
// (docs/in-place-restart.md): on its node, it stops the running workers of a pod's old
// attempt (through the barrier that supervises them, which waits again in the same
// container; else through the container runtime, CRI StopContainer: their non-zero exit
// fires the pod's RestartAllContainers rule and the kubelet restarts every container of the
// pod in place), and opens the barrier of a pod waiting for the attempt the gang is to run
// (through its socket, or CRI ExecSync of `faultline-barrier open --attempt N` in the
// barrier's container).
//
// What to do with a pod is decided by Decide, a pure function of the pod's status, the
// attempt decided and whether the gang's barrier is open; Restarter does it through the CRI
// and is idempotent: stopping what is stopped and opening what is open do nothing.
package inplace

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// Action is what the agent is to do with one pod.
type Action string

const (
	// ActionNone: nothing, now or later, for this attempt: the pod runs the attempt (or a
	// newer one), is ending (its index moves, the recreate path's business), or does not
	// restart in place.
	ActionNone Action = "None"
	// ActionWait: nothing yet: the kubelet is restarting the pod, or its barrier waits for
	// the gang's go signal.
	ActionWait Action = "Wait"
	// ActionStopWorkers: stop the running workers of the old attempt (Decision.Containers).
	ActionStopWorkers Action = "StopWorkers"
	// ActionOpenBarrier: give the waiting barrier the go signal of the attempt.
	ActionOpenBarrier Action = "OpenBarrier"
)

// Decision is Decide's answer for one pod.
type Decision struct {
	Action Action
	// Containers are, for ActionStopWorkers, the runtime IDs (the part of the status's
	// containerID after "<runtime>://") of the old attempt's running workers. Only these
	// are stopped: a status read before an in-place restart names the old containers, so
	// however late it is acted on, it never stops the new attempt's.
	Containers []string
	// Reason says why, for logs.
	Reason string
	// Recorded, with ActionNone, names the worker container that the agent's record says
	// it opened for the attempt (a barrier in the worker container): opened, unless the
	// agent stopped between its record and its open, which Restarter.Sync makes sure of.
	Recorded string
	// Restarting, with ActionWait: the pod's status shows its barrier not (re)started yet,
	// which is the kubelet's to do. The status follows the runtime by a relist and a status
	// write; the runtime may run the barrier already (Restarter.BarrierRunning), and with
	// the gang's barrier open it is to be opened then.
	Restarting bool
}

// Decide says what to do with pod for attempt, the attempt the controller decided the gang
// is to run; barrierOpen says the controller released the gang's barrier for it (every old
// worker of the gang stopped).
//
// A pod's attempt is the one its barrier last opened for (attempt.Barrier): an init
// container barrier's termination message (barrier.OpenedMessage), which the kubelet keeps
// in the status while the workers it let start run; for a barrier in the worker container,
// the agent's own record of the open (v1alpha1.BarrierRecord), written before it. A barrier
// that waits holds the pod's workers back: the kubelet removed every old container before it
// started it. A pod made for a later attempt than attemptN is never opened for it (the
// agent's view of the run lags).
func Decide(pod *corev1.Pod, attemptN int, barrierOpen bool) Decision {
	b := attempt.BarrierOf(pod)
	switch {
	case pod.DeletionTimestamp != nil:
		return Decision{Action: ActionNone, Reason: "the pod is being deleted"}
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return Decision{Action: ActionNone, Reason: fmt.Sprintf("the pod ended (%s)", pod.Status.Phase)}
	case b.Place == attempt.NoBarrier:
		return Decision{Action: ActionNone, Reason: "the pod has no " + v1alpha1.BarrierContainer + ": it does not restart in place"}
	case attempt.Spare(pod):
		return Decision{Action: ActionNone, Reason: "a warm spare: it holds no index, and its barrier starts nothing before the controller hands it one"}
	}
	made, _ := attempt.Number(pod)
	restarting := int(made) <= attemptN
	if b.Place == attempt.BarrierInWorker {
		return decideInWorker(b, made, attemptN, barrierOpen)
	}
	st := b.Status
	switch _, waiting := b.Waiting(); {
	case st == nil || st.State.Waiting != nil || (st.State.Running == nil && st.State.Terminated == nil):
		return Decision{Action: ActionWait, Reason: "the barrier has not started", Restarting: restarting}
	case waiting:
		return waitingBarrier(made, attemptN, barrierOpen)
	}
	t := st.State.Terminated
	ran, ok := b.Opened()
	if t.ExitCode != 0 || !ok {
		// Killed or failed before it opened: the pod does not start its workers (a failed
		// init container fails a restartPolicy Never pod) and its index moves.
		return Decision{Action: ActionNone, Reason: fmt.Sprintf("the barrier ended with exit %d message %q: it never opened", t.ExitCode, t.Message)}
	}
	if int(ran) >= attemptN {
		return Decision{Action: ActionNone, Reason: fmt.Sprintf("the pod runs attempt %d", ran)}
	}
	var ids []string
	for _, c := range pod.Spec.Containers {
		if s := statusOf(pod.Status.ContainerStatuses, c.Name); s != nil && s.State.Running != nil && s.ContainerID != "" {
			ids = append(ids, attempt.RuntimeID(s.ContainerID))
		}
	}
	if len(ids) == 0 {
		// They ended by themselves (the fault, or a peer's loss): their rule fires on its own.
		return Decision{Action: ActionWait, Reason: fmt.Sprintf("no worker of attempt %d runs: the kubelet restarts the pod", ran), Restarting: restarting}
	}
	return Decision{Action: ActionStopWorkers, Containers: ids, Reason: fmt.Sprintf("the pod runs attempt %d, older than %d", ran, attemptN)}
}

// waitingBarrier is the decision for a pod whose barrier waits.
func waitingBarrier(made int32, attemptN int, barrierOpen bool) Decision {
	switch {
	case int(made) > attemptN:
		// The agent's view of the run lags: a pod made for a later attempt than the one it
		// reads is never started as an older one (its barrier would refuse it too).
		return Decision{Action: ActionWait, Reason: fmt.Sprintf("the pod was made for attempt %d and the run, as read here, decides attempt %d: a stale view opens nothing", made, attemptN)}
	case barrierOpen:
		return Decision{Action: ActionOpenBarrier, Reason: fmt.Sprintf("the barrier waits and the gang's barrier is open for attempt %d", attemptN)}
	}
	return Decision{Action: ActionWait, Reason: fmt.Sprintf("the barrier waits for the gang's go signal of attempt %d", attemptN)}
}

// decideInWorker is Decide for a pod whose barrier is its worker container's entrypoint:
// the container the agent's record names runs the recorded attempt (or ran it, or is about
// to: the record comes before the open); any other container of the worker waits at its
// barrier. That barrier supervises its worker, and a stop leaves it waiting in the same
// container (Barrier.Waiting); the cases of an ended container, which the kubelet restarts,
// stay for a worker that ended on its own (the barrier ends with it) and for a container
// stopped through the runtime (its barrier's socket out of reach: StopOldWorkers).
func decideInWorker(b attempt.Barrier, made int32, attemptN int, barrierOpen bool) Decision {
	st, rec := b.Status, b.Record
	restarting := int(made) <= attemptN
	if _, waiting := b.Waiting(); waiting {
		if rec != nil && int(rec.Attempt) >= attemptN {
			// An earlier container of the pod ran the attempt (its worker ended on its own):
			// the barrier would refuse it as stale, and a record of this container for it
			// would count a waiting barrier as a running worker. The next decision opens it.
			return Decision{Action: ActionWait, Reason: fmt.Sprintf("the pod ran attempt %d in an earlier container: its barrier waits for a later one", rec.Attempt)}
		}
		return waitingBarrier(made, attemptN, barrierOpen)
	}
	ran, recorded := b.Opened()
	switch {
	case !recorded && st != nil && st.State.Terminated != nil:
		return Decision{Action: ActionWait, Reason: fmt.Sprintf("the worker ended at its barrier (exit %d): the kubelet restarts the pod", st.State.Terminated.ExitCode), Restarting: restarting}
	case !recorded:
		return Decision{Action: ActionWait, Reason: "the barrier has not started", Restarting: restarting}
	case int(ran) >= attemptN:
		d := Decision{Action: ActionNone, Reason: fmt.Sprintf("the pod runs attempt %d", ran)}
		if int(ran) == attemptN && barrierOpen && (st == nil || st.State.Terminated == nil) {
			// Recorded, and opened unless the agent stopped between its record and its open:
			// the restarter makes sure once (Restarter.Sync).
			d.Recorded = rec.ContainerID
		}
		return d
	case st != nil && st.State.Terminated != nil && st.RestartCount == rec.Restart:
		return Decision{Action: ActionWait, Reason: fmt.Sprintf("no worker of attempt %d runs: the kubelet restarts the pod", ran), Restarting: restarting}
	case b.Stopped(int32(attemptN)):
		// Its agent stopped it (the runtime said so) and recorded it: a status that still
		// shows it running lags.
		return Decision{Action: ActionWait, Reason: fmt.Sprintf("its worker of attempt %d was stopped for attempt %d: the kubelet restarts the pod", ran, rec.StoppedFor), Restarting: restarting}
	}
	// The recorded container, as the record names it: a status that lags the record shows
	// the one before.
	return Decision{Action: ActionStopWorkers, Containers: []string{rec.ContainerID}, Reason: fmt.Sprintf("the pod runs attempt %d, older than %d", ran, attemptN)}
}

func hasBarrier(pod *corev1.Pod) bool { return attempt.RestartsInPlace(&pod.Spec) }

func statusOf(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}
