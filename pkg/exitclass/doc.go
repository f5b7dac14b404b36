// Package exitclass decides, for one attempt of a distributed training run (the pods of an
// Indexed Job), whether the infrastructure or the program failed, and which pod failed first.
//
// It is pure: Classify takes an Observation (pods, node facts, framework hints, the time and
// the settle deadline) and returns a Verdict. It calls no API, reads no clock and imports no
// client. The XID table (xid.go) is shared with the node agent.
//
// # Failed pods
//
// A pod has failed when its phase is Failed, when a container (init containers included) has
// terminated with a non-zero exit code, when a container's state is ContainerStatusUnknown,
// or when it is lost with its node: the node is Gone, or the pod is being deleted
// (deletionTimestamp) while its node is NotReady (nothing will confirm its end), or the node
// has stayed unreachable (the node lifecycle controller's node.kubernetes.io/unreachable
// taint: nothing has heard from its kubelet, and nothing will report the pod's end) past the
// pod's bound; or when its worker runs on fatal infrastructure evidence (below, "A fault
// need not end the program"). Succeeded pods, and running pods without such evidence, are
// not failures. Failed applies this test alone, and is the one definition the controller
// uses. A pod whose node is missing from Observation.Nodes has unknown node facts, which is
// not the same as a gone node.
//
// An unreachable node is not a lost one at once: a kubelet that restarts (an upgrade, a crash
// loop, a configuration change) or a heartbeat that comes late leaves its node unreachable
// for a moment while every worker runs on, and Kubernetes itself waits before it evicts
// anything. The bound is the pod's own toleration of node.kubernetes.io/unreachable (300 s
// unless the pod says otherwise; for ever with no tolerationSeconds; none without a
// toleration), counted from when the node turned unreachable, or the moment the node's agent
// has gone silent too (its heartbeat Lease expired, NodeFacts.Agent), whichever comes first:
// two processes silent at once are a dead or cut-off machine, not a restarting kubelet. A
// pod created after its node turned unreachable is never lost by it. Now is the
// observation's time; LostAt says when a pod within its bound would be lost.
//
// The exit that stands for a pod is its earliest non-zero container exit, else a container
// whose state the kubelet lost, else any terminated container (a program that handles SIGTERM
// in a node shutdown exits 0 in a Failed pod). Its finishedAt is the pod's failure time; a
// worker that runs on fatal evidence has no exit, and its failure time is the evidence's; a
// pod without an exit otherwise (lost, or rejected at admission) takes the earliest time
// recorded by its InfrastructureFault or DisruptionTarget condition, its deletion or its node
// turning unreachable, else its time is unknown and sorts after every known time.
//
// # A fault need not end the program
//
// A GPU that fell off the bus (XID 79), an NVLink error (74) or a double-bit ECC error (48)
// often leaves the worker blocked in a CUDA call or a collective, and its peers in the same
// collective, until a framework's timeout ends a process (minutes), or never. A pod whose
// worker runs (a container of it runs; its init containers, such as a barrier, are not the
// worker) has failed by fatal infrastructure evidence on it, attested as rule 1 below
// attests it: the InfrastructureFault condition in its status and, beside it, the evidence
// annotation of the same cause naming the pod's node and a time not before the running
// incarnation started (the earliest start of its running containers: the evidence of an
// incarnation before a restart in place is stale). Fatal is:
//
//   - GPUFault with an XID that LookupXID calls Fatal (never a program's XID, a Secondary
//     one or a non-fatal one: those never end an attempt by themselves), or GPUFault
//     without an XID, which the agent writes only for a fatal state (its GPU lost, a
//     double-bit ECC error, a recovery the driver requires). The pod has failed at the
//     evidence's time.
//   - NodeShutdown, once the pod's termination grace period (30 s unless it says otherwise)
//     and 5 s more (the kubelet's report of its kill) have passed since the announcement:
//     the kubelet's graceful node shutdown had that long to end the worker, and a worker
//     still running then was not ended by it (a kubelet without graceful shutdown, a node
//     that does not go down). Before that the kubelet is ending it, or the shutdown may be
//     cancelled (the agent then withdraws its evidence).
//
// The rules below then judge the pod as rule 1 says, and its verdict says that the worker was
// still running (Verdict.StillRunning) and for how long. FailsAt says when a pod will have
// failed so, for a caller that must look again then. The controller waits the settle window
// after the evidence before it acts (the worker may still end by itself, and its exit then
// tells more), then stops the hung worker with its attempt.
//
// # The node agent's report of an exit
//
// The node agent reports the exit of every failed worker of its node, where it follows the
// container runtime's events (v1alpha1.AnnotationWorkerExit): for a pod that restarts in
// place the controller puts it in the pod's status (which never shows that exit) before
// Classify sees the pod; beside a status that shows the same exit (the same container ID,
// node and exit code) Classify reads it for two things the status cannot hold: its
// finishedAt to the nanosecond (the API keeps the second), which replaces the status's when
// both fall in the same second, and its message, which holds the kubelet's (the log's last
// 80 lines, 2 KiB) and, above it, the lines that matter from further up the log (the first
// Python traceback, the framework's error and fatal records: pkg/nodeagent/termmsg); the
// hints read it instead.
//
// # One pod's own cause
//
// Exit code 128+n is signal n. The first rule below that applies decides the pod's own cause.
// Infrastructure evidence outranks messages from the program, because a failing node makes
// programs print arbitrary errors and never the reverse; OOMKilled is the exception among the
// node-level facts because it is the kernel's statement about this very container.
//
//  1. Condition faultline.dev/InfrastructureFault=True, attested: its reason is the cause,
//     whatever the exit code. Attested means what only the node agent can write: the
//     condition is in the pod's status (which the edit role cannot write; admission keeps
//     everyone but the agent of the pod's node off it), and beside it the evidence
//     annotation of the same cause names the pod's own node (spec.nodeName) and a time
//     inside the failing container's life (see "Times" below). A condition without that is
//     noted and ignored (stale, or its evidence changed). A reason that is not an
//     infrastructure cause is noted and ignored: the Job's podFailurePolicy treats the
//     condition as infrastructure whatever its reason, so an application cause there would
//     be a contradiction (program-caused XIDs travel in the annotation, rule 2).
//  2. Annotation faultline.dev/fault-evidence (JSON v1alpha1.FaultEvidence) on its own: it is
//     metadata, which anyone who may edit the pod can write, so it may point at the
//     application but never prove infrastructure. With a GPU XID, LookupXID decides what it
//     claims: AppGPUError (a program-caused XID, Application) counts when attested (the
//     pod's node, a time inside its life); GPUFault needs rule 1. A Secondary XID (45)
//     decides nothing. Without an XID its cause field is the claim, except LimitExceeded:
//     that names the kubelet's eviction, which only the pod's status proves (rule 4). Unattested or
//     infrastructure-only evidence is noted and ignored; malformed JSON never panics: it
//     becomes an evidence line saying the annotation is unreadable.
//  3. Condition DisruptionTarget=True, unless it was set more than a second (the granularity
//     of Kubernetes timestamps) after the container had exited:
//     TerminationByKubelet → NodeShutdown with shutdown evidence (status reason
//     Terminated/Shutdown/NodeShutdown, or the node's shutdown announcement), Preemption with
//     status reason Preempting (kubelet making room for a critical pod), else Eviction
//     (node-pressure eviction); PreemptionByScheduler → Preemption; EvictionByEvictionAPI →
//     PlannedMaintenance when the node is being taken away: cordoned (NodeFacts.Unschedulable:
//     kubectl drain and node-pool upgrades cordon, then evict), tainted by a platform that
//     drains without a cordon (NodeFacts.DisruptionTaint: Karpenter, the cluster
//     autoscaler), or Gone; else Eviction (a tenant may evict their own pods: the eviction
//     alone buys no budget-free restart); DeletionByTaintManager → NodeLost when the node is
//     NotReady or Gone (the unreachable/not-ready NoExecute taints), else NodeMaintenance (a
//     NoExecute taint put on a healthy node); DeletionByPodGC → NodeLost; any other reason →
//     Eviction (the condition always means the system disrupted the pod).
//  4. pod.Status.Reason: Evicted → LimitExceeded (Application) when the kubelet's message
//     says the pod exceeded a limit of its own (its ephemeral-storage limits, an emptyDir's
//     sizeLimit), else Eviction; Preempting → Preemption; Terminated, Shutdown
//     (kubelet graceful node shutdown, old and new) and NodeShutdown (not admitted while
//     shutting down) → NodeShutdown; NodeLost → NodeLost; OutOfnvidia.com/gpu → GPUFault;
//     UnexpectedAdmissionError → GPUFault when the pod requests nvidia.com/gpu (the device
//     plugin failed to allocate; the program never ran), otherwise no evidence.
//  5. The node's shutdown announcement (faultline.dev/shutdown-detected-at) inside the failing
//     container's life → NodeShutdown, for any exit code: programs exit 143, 137, 1 or even 0
//     when the node goes down under them. An announcement after the exit, or before the
//     container started (stale), is noted and not counted.
//  6. Container reason OOMKilled → OOMKilled (Application).
//  7. The node's faultline.dev/GPUHealthy=False, turned so inside the failing container's life
//     (a GPU unhealthy since before it started explains nothing of its exit), and a non-zero
//     exit → GPUFault. This is node-level (the pod's own GPU may be healthy) and so weaker
//     than rule 1, but still infrastructure. It is not limited to pods requesting
//     nvidia.com/gpu, since GPUs allocated through DRA do not show up as that resource.
//     7b. A condition of the node's own health checker (NodeConditionRule: NVSentinel's by
//     default, DefaultNodeConditionRules), in its unhealthy status since inside the failing
//     container's life, and a non-zero exit → the rule's cause (GPUFault unless it names
//     another), as rule 7; the checker's service account writes the Node's status, which
//     no tenant can.
//  8. The node Gone or NotReady → NodeLost (the verdict says how long an unreachable node
//     had been so, the pod's toleration and its agent's heartbeat).
//  9. A hint matching the termination message of the pod's failing container (or the
//     agent's report of it, above): an application cause counts as that application cause
//     (a hint may not claim LimitExceeded: CompileHints refuses it).
//     Hints are tried in order; the first match wins. A PeerFailure hint marks the pod as a
//     peer (below) and decides nothing else; when its pattern has the named group
//     HintGroupPeer (and HintGroupRole), the match also names the worker that failed (see
//     "Root cause across the gang"), and a message that names the very pod that printed it
//     is that pod's own failure, not a peer's (a coordination service tells the worker it
//     lost the same as the others): no hint decides it, and the rules below do. A hint with
//     an infrastructure cause is the program's own word, not node evidence: it is noted and
//     skipped (the hints after it still match).
//  10. Otherwise the exit code alone: 143 or 137 (SIGTERM/SIGKILL from someone), a lost
//     container, exit 0 in a failed pod, or only a PeerFailure message → Unknown; any other
//     non-zero exit → AppExit.
//
// # Times
//
// A signal counts for a failure when it was recorded inside the failing worker's life: not
// before its incarnation began and not more than a second (the granularity of Kubernetes
// timestamps) after the container exited. The incarnation is the one definition every rule
// reads (attempt.WorkerStart, attempt.RunningWorkers): its container's start (its
// startedAt, else the pod's creation), except where the barrier is the container's
// entrypoint: there the node agent's recorded open of the attempt it runs
// (BarrierRecord.OpenedAt), since a supervising barrier keeps one container across attempts
// and a kept pod still carries an earlier attempt's marks. An earlier incarnation's signal,
// or a node's from before the program ran, is stale. This holds for the agent's evidence
// (rules 1 and 2), the node's shutdown announcement (5), its GPU health (7), a running
// worker's fatal evidence and its NoProgress condition; a worker waiting at its barrier runs
// no worker at all, so it can neither hang nor be silent. When the evidence is written does not matter: the agent may finish writing just
// after the container exits, which is what the settle window waits for. Readiness has no
// time and is not compared.
//
// Rules 1-9 are evidence; a pod decided by one of them with a cause of class Infrastructure
// or Application is conclusive. AppExit from rule 10 is not: the node agent may still be
// writing the evidence that explains it. What counts as application evidence is defined
// once, beside claimable in evidence.go, and the fuzz test's oracle reads the same
// definition.
//
// # Root cause across the gang
//
// The root is the earliest failure with infrastructure evidence; else the worker the failed
// pods' messages name as the one that failed; else the earliest failure that is not merely
// a PeerFailure message; else the earliest failure (whose cause is then Unknown: PeerFailure
// is never a root cause). Earliest means by failure time, ties broken by lowest completion
// index, then pod name; two times in the same second of which one is known only to the
// second (the API's) count as a tie against one to the nanosecond (the agent's report). A
// node that died under one worker explains the coordination errors of the other 255, and in
// collective communication the worker on the broken node is often the last to exit, hence
// infrastructure first.
//
// A named worker is the root whatever its exit code and whenever it exited, its own cause
// its own: XLA's coordination service aborts every process of a JAX gang (exit 134) in the
// same second, the failed one too when it is still there, and says which task it lost. A
// name is a completion index, or, when the hint captures a role and the run lays its
// indexes out in roles (v1alpha1.AnnotationRoles), an index within that role (a role or
// number the layout lacks names nobody). Every mention
// must name the same index and that pod must have failed; names that disagree, or name a
// worker that has not failed, decide nothing. The evidence says which pods named whom, and
// Verdict.NamedBy counts the mentions of the root.
//
// Every other failed pod is listed in Verdict.Peers, attributed to the root (cause
// PeerFailure) and sorted by index, unknown indexes last: the non-specific exits (143/137
// without evidence), the PeerFailure messages, every other failure when the root is
// infrastructure, and also a specific exit after a root that is not, since the verdict's
// class is the root's. PeerFailure.OwnCause tells them apart. A peer with evidence of its own
// that points elsewhere (an application cause such as OOMKilled, or another infrastructure
// cause or node) also gets an evidence line, but the root stays as decided.
//
// # Final
//
// A verdict is Conclusive when the root's own cause is conclusive (above), and Final when it
// is Conclusive or Now has reached SettleDeadline. A plain AppExit or Unknown before the
// deadline is not Final, so no verdict of class Application is Final before the deadline
// unless OOMKilled, a program XID, an application condition or an application hint says so.
// Unknown is never Conclusive.
//
// # Progress
//
// A gang can hang with no evidence at all (a deadlock in the input pipeline, a stuck
// filesystem). With the run's progress deadline (spec.failurePolicy.progressDeadlineSeconds)
// the node agent watches each worker's progress and writes the NoProgress condition on a
// worker that has shown none for the deadline: its lastTransitionTime is the worker's last
// progress, its reason the signal that stopped (LogSilent: its containers' logs did not
// grow). It counts when it is True in the status of a pod whose worker runs, about the
// running incarnation (its time not before the incarnation started, less the second of
// Kubernetes timestamps). An attempt has stopped making progress (Stalled) when it has pods
// and every one carries it: a gang in which one worker progresses has not, whatever the
// others do. With no failed pod, Classify judges such an attempt NoProgress (class Unknown,
// never Conclusive): its root is the worker silent the longest (ties by index, then name),
// its failure time the gang's last progress, its peers every other worker, and the evidence
// has a line for each of up to eight workers with what its condition says. Failures come
// first: a pod that has failed makes the verdict its own.
//
// # Evidence and explanation
//
// Verdict.Evidence has one fact per line about the root, including facts that did not count
// and why (an unreadable annotation, a shutdown announced after the exit), the first error
// in its output (a Python traceback's exception line), what the failed pods' messages name,
// then a line for each of up to eight peers with independent evidence. Verdict.Basis is the
// deciding fact as a phrase, and Verdict.Explain renders one paragraph from the verdict.
// Times are UTC, as 15:04:05.000.
//
// # XIDs
//
// LookupXID maps an XID to GPUFault or AppGPUError and says whether the GPU needs a reset or
// drain (Fatal). An XID the table does not know is GPUFault and not fatal: see LookupXID.
package exitclass
