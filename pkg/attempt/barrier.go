package attempt

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// inPlaceShape makes a worker pod one that restarts in place (docs/in-place-restart.md):
//
//   - every worker container restarts all the pod's containers on any non-zero exit
//     (KEP-5532's RestartAllContainers): a worker that dies, or that the node agent stops,
//     brings its pod back to the barrier instead of failing it;
//   - the barrier holds the workers until the node agent gives it the go signal of the
//     attempt the gang runs, then writes that attempt to the run volume's attempt file. It
//     is the worker container's own entrypoint where inWorker and the template allow it
//     (BarrierCanBeWorker: one container, one process, nothing between the open and the
//     worker's start), else the last init container (after the user's, which run again at
//     each restart);
//   - every container reads the attempt from that file (FAULTLINE_ATTEMPT_FILE):
//     FAULTLINE_ATTEMPT is the pod's first attempt and cannot change in a running pod.
//   - the barrier knows the attempt its pod was made for (FAULTLINE_ATTEMPT, which Pod sets
//     for a pod made for a later attempt than its Job's): it never opens for an older one,
//     whatever an agent with a stale view of the run asks.
func inPlaceShape(spec *corev1.PodSpec, image string, n int32, inWorker bool) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: v1alpha1.RunVolume, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi"))},
	}})
	inWorker = inWorker && BarrierCanBeWorker(spec)
	fileEnv := corev1.EnvVar{Name: v1alpha1.EnvAttemptFile, Value: v1alpha1.AttemptFile}
	for i := range spec.InitContainers {
		spec.InitContainers[i].Env = append(spec.InitContainers[i].Env, fileEnv)
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.Env = append(c.Env, fileEnv)
		// Read-only to a worker: only the barrier writes the attempt file and listens there.
		// A barrier in the worker container writes it as that container's first process.
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v1alpha1.RunVolume, MountPath: v1alpha1.RunDir, ReadOnly: !inWorker})
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
		c.RestartPolicyRules = append([]corev1.ContainerRestartRule{{
			Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{0}},
		}}, c.RestartPolicyRules...)
	}
	if inWorker {
		barrierInWorker(spec, image)
		return
	}
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:  v1alpha1.BarrierContainer,
		Image: image,
		// Tiny and idle: it waits on a socket for the agent's exec.
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi")},
		},
		Env:                      []corev1.EnvVar{{Name: v1alpha1.EnvAttempt, Value: strconv.Itoa(int(n))}},
		VolumeMounts:             []corev1.VolumeMount{{Name: v1alpha1.RunVolume, MountPath: v1alpha1.RunDir}},
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	})
}

// barrierInWorker makes the barrier the entrypoint of spec's one container: its command
// becomes `faultline-barrier supervise -- <command>`, which stays with the worker as its
// child, from an image volume of the barrier's image (its args stay as they are: the
// kubelet expands $(VAR) in both, as before). The barrier reads the attempt the pod was
// made for from the worker's own FAULTLINE_ATTEMPT.
func barrierInWorker(spec *corev1.PodSpec, image string) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: v1alpha1.BarrierVolume, VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: image, PullPolicy: corev1.PullIfNotPresent},
	}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v1alpha1.BarrierVolume, MountPath: v1alpha1.BarrierMount, ReadOnly: true})
	c.Command = append([]string{v1alpha1.BarrierBinary, barrier.CommandSupervise, "--"}, c.Command...)
	// Where the worker says it saved, when a planned move asks it to (spec.checkpoint).
	c.Env = append(c.Env, corev1.EnvVar{Name: v1alpha1.EnvCheckpointDir, Value: v1alpha1.CheckpointDir})
}

// saveOnNotice tells the barrier that supervises spec's worker how the run saves on notice
// (spec.checkpoint): the container's SIGTERM, a node's shutdown, asks the worker to save
// first (barrier.Supervise). Nothing where the barrier does not supervise the worker.
func saveOnNotice(spec *corev1.PodSpec, p *v1alpha1.CheckpointPolicy) {
	if _, place := BarrierContainer(spec); place != BarrierInWorker || p == nil {
		return
	}
	sig, timeout := p.Signal, time.Duration(p.TimeoutSeconds)*time.Second
	if sig == "" {
		sig = v1alpha1.DefaultCheckpointSignal
	}
	if timeout <= 0 {
		timeout = v1alpha1.DefaultCheckpointTimeoutSeconds * time.Second
	}
	c := &spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: v1alpha1.EnvCheckpointSignal, Value: sig},
		corev1.EnvVar{Name: v1alpha1.EnvCheckpointTimeout, Value: timeout.String()})
}

// BarrierCanBeWorker reports whether the barrier can be the entrypoint of spec's worker:
// one container, whose command is set. Taking an image's own entrypoint would need a
// registry read with the pod's pull secrets, and a pod of several containers a barrier and
// a go signal each; those keep the init container.
func BarrierCanBeWorker(spec *corev1.PodSpec) bool {
	return len(spec.Containers) == 1 && len(spec.Containers[0].Command) > 0
}

// InPlaceShape reports whether a Job's pods restart in place (their template has the barrier).
func InPlaceShape(job *batchv1.Job) bool {
	return job != nil && RestartsInPlace(&job.Spec.Template.Spec)
}

// RestartsInPlace reports whether a pod of spec restarts in place: it has the barrier
// (inPlaceShape), in an init container or as its worker's entrypoint. The controller, the
// node agent and their tests ask it of pods and Jobs.
func RestartsInPlace(spec *corev1.PodSpec) bool {
	_, place := BarrierContainer(spec)
	return place != NoBarrier
}

// BarrierPlace says where a pod's barrier is.
type BarrierPlace int

const (
	// NoBarrier: the pod does not restart in place.
	NoBarrier BarrierPlace = iota
	// BarrierInit: the faultline-barrier init container, which exits with the attempt it
	// opened for as its termination message.
	BarrierInit
	// BarrierInWorker: the worker container's entrypoint, which supervises the worker
	// and leaves no message; the node agent's record (v1alpha1.BarrierRecord) says which
	// container it opened for which attempt.
	BarrierInWorker
)

// BarrierContainer is the name of the container of spec that is its barrier, and where it is.
func BarrierContainer(spec *corev1.PodSpec) (string, BarrierPlace) {
	if slices.ContainsFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == v1alpha1.BarrierContainer }) {
		return v1alpha1.BarrierContainer, BarrierInit
	}
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == v1alpha1.BarrierVolume && v.Image != nil }) {
		return "", NoBarrier
	}
	for _, c := range spec.Containers {
		if len(c.Command) > 0 && c.Command[0] == v1alpha1.BarrierBinary {
			return c.Name, BarrierInWorker
		}
	}
	return "", NoBarrier
}

// KeepBarrier copies into slim what BarrierContainer reads of spec, for the caches that keep
// of a pod's spec only what they read: the barrier's image volume, and the first word of
// the command of the container whose entrypoint it is. slim's containers are spec's, in
// the same order.
func KeepBarrier(spec, slim *corev1.PodSpec) {
	for _, v := range spec.Volumes {
		if v.Name == v1alpha1.BarrierVolume && v.Image != nil {
			slim.Volumes = append(slim.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: v.Image.Reference}}})
		}
	}
	for i, c := range spec.Containers {
		if len(c.Command) > 0 && c.Command[0] == v1alpha1.BarrierBinary && i < len(slim.Containers) {
			slim.Containers[i].Command = []string{c.Command[0]}
		}
	}
}

// BarrierImage is the barrier's image in spec, "" if it has none.
func BarrierImage(spec *corev1.PodSpec) string {
	for _, c := range spec.InitContainers {
		if c.Name == v1alpha1.BarrierContainer {
			return c.Image
		}
	}
	for _, v := range spec.Volumes {
		if v.Name == v1alpha1.BarrierVolume && v.Image != nil {
			return v.Image.Reference
		}
	}
	return ""
}

// BarrierRecord reads the node agent's record on pod (v1alpha1.AnnotationBarrierRecord), nil
// when there is none or it does not parse.
func BarrierRecord(pod *corev1.Pod) *v1alpha1.BarrierRecord {
	raw, ok := pod.Annotations[v1alpha1.AnnotationBarrierRecord]
	if !ok {
		return nil
	}
	rec := &v1alpha1.BarrierRecord{}
	if json.Unmarshal([]byte(raw), rec) != nil || rec.ContainerID == "" || rec.Attempt < 1 {
		return nil
	}
	return rec
}

// LaterRecord reports whether a is a later record of a pod's barrier than b (nil: none). A
// pod's records only move on: to a later container (its restart number), and in one
// container to a later attempt opened, then to a stop for a later one (a supervising
// barrier: stopped for n, then opened for n, then stopped for n+1...).
func LaterRecord(a, b *v1alpha1.BarrierRecord) bool {
	switch {
	case a == nil:
		return false
	case b == nil:
		return true
	case a.Restart != b.Restart:
		return a.Restart > b.Restart
	case a.Attempt != b.Attempt:
		return a.Attempt > b.Attempt
	}
	return a.StoppedFor > b.StoppedFor
}

// WithRecord is pod with rec as its barrier record (v1alpha1.AnnotationBarrierRecord) where
// rec is later than the record the pod carries (LaterRecord), else pod itself: how the
// controller and the agent read a record their node's agent keeps on its heartbeat
// (v1alpha1.AnnotationBarrierRecords) beside those on the pods. The copy shares all but its
// annotations with pod: callers that read from a cache they must not change get a copy to
// read.
func WithRecord(pod *corev1.Pod, rec *v1alpha1.BarrierRecord) *corev1.Pod {
	if rec == nil || rec.ContainerID == "" || rec.Attempt < 1 || !LaterRecord(rec, BarrierRecord(pod)) {
		return pod
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return pod
	}
	cp := *pod
	cp.Annotations = maps.Clone(pod.Annotations)
	if cp.Annotations == nil {
		cp.Annotations = map[string]string{}
	}
	cp.Annotations[v1alpha1.AnnotationBarrierRecord] = string(raw)
	return &cp
}

// RuntimeID is a status's containerID ("containerd://<id>") as the CRI names it.
func RuntimeID(containerID string) string {
	if _, id, ok := strings.Cut(containerID, "://"); ok {
		return id
	}
	return containerID
}

// Barrier is a pod's barrier as the kubelet reports it (and, for a barrier in the worker
// container, as the node agent's record names its container): whether it waits, which
// attempt it opened for. The controller and the node agent read a pod's attempt only here.
type Barrier struct {
	Place BarrierPlace
	// Container is the name of the barrier's container: the init container, or the worker.
	Container string
	// Status is that container's status, nil while the kubelet reports none.
	Status *corev1.ContainerStatus
	// Record is the node agent's record (BarrierInWorker only), nil if none.
	Record *v1alpha1.BarrierRecord
	pod    *corev1.Pod
}

// BarrierOf is pod's barrier. An init container's status that names the barrier says where
// it is too.
func BarrierOf(pod *corev1.Pod) Barrier {
	name, place := BarrierContainer(&pod.Spec)
	if place == NoBarrier && slices.ContainsFunc(pod.Status.InitContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == v1alpha1.BarrierContainer }) {
		name, place = v1alpha1.BarrierContainer, BarrierInit
	}
	b := Barrier{Place: place, Container: name, pod: pod}
	statuses := pod.Status.ContainerStatuses
	switch place {
	case NoBarrier:
		return b
	case BarrierInit:
		statuses = pod.Status.InitContainerStatuses
	case BarrierInWorker:
		b.Record = BarrierRecord(pod)
	}
	if i := slices.IndexFunc(statuses, func(cs corev1.ContainerStatus) bool { return cs.Name == name }); i >= 0 {
		b.Status = &statuses[i]
	}
	return b
}

// record says how the record of a barrier in the worker container stands to the container
// the status shows: it names that container (current); it names an earlier one, removed
// since, or there is none (gone: the container shown was never opened); or neither, which
// is the status lagging the record (the agent acts on the runtime's start event, before the
// kubelet's relist): the recorded container counts as running its attempt then.
func (b Barrier) record() (current, gone bool) {
	rec, st := b.Record, b.Status
	switch {
	case rec == nil:
		return false, true
	case st == nil:
		return false, false
	case st.RestartCount > rec.Restart:
		return false, true
	}
	return st.RestartCount == rec.Restart && (st.ContainerID == "" || RuntimeID(st.ContainerID) == rec.ContainerID), false
}

// Waiting reports whether the barrier runs and holds the pod's workers back, and since when
// (the container's start: a supervising barrier waiting again says no later time).
func (b Barrier) Waiting() (time.Time, bool) {
	if b.Status == nil || b.Status.State.Running == nil {
		return time.Time{}, false
	}
	if b.Place == BarrierInWorker {
		if _, gone := b.record(); !gone && !b.waitsAgain() {
			return time.Time{}, false
		}
	}
	return b.Status.State.Running.StartedAt.Time, true
}

// waitsAgain: a barrier in the worker container (it supervises its worker) whose recorded
// worker its agent stopped for a later attempt waits, in the same container, for that
// attempt's open. A container the agent stopped through the runtime instead (its barrier's
// socket out of reach; or a pod an older controller made whose barrier became the worker,
// `faultline-barrier exec`, and listens no more) reads the same until its status shows it
// ended: it runs no worker of the recorded attempt either way.
func (b Barrier) waitsAgain() bool {
	if b.Record == nil || b.Record.StoppedFor <= b.Record.Attempt {
		return false
	}
	_, gone := b.record()
	return !gone
}

// Opened is the attempt the barrier opened for since the pod last (re)started: the attempt
// its workers run, or ran; ok is false when it has not opened since.
func (b Barrier) Opened() (int32, bool) {
	switch b.Place {
	case BarrierInit:
		if b.Status != nil && b.Status.State.Terminated != nil {
			if m, ok := barrier.ParseOpenedMessage(b.Status.State.Terminated.Message); ok {
				return int32(m), true
			}
		}
	case BarrierInWorker:
		if _, gone := b.record(); !gone && !b.waitsAgain() {
			return b.Record.Attempt, true
		}
	}
	return 0, false
}

// OpenedBefore is the attempt the barrier opened for before the pod's last restart, when the
// barrier has started again since: the workers that restart ended it. For a barrier in the
// worker container, only the restart right after the recorded container counts: that
// container's end is the status's last termination. A supervising barrier's container
// restarts too: when its worker ends on its own (the barrier ends with it, and the kubelet
// restarts the pod through RestartAllContainers), and when its agent, its socket out of
// reach, stopped it through the runtime.
func (b Barrier) OpenedBefore() (int32, bool) {
	st := b.Status
	if st == nil {
		return 0, false
	}
	switch b.Place {
	case BarrierInit:
		if last := st.LastTerminationState.Terminated; st.State.Terminated == nil && last != nil {
			if m, ok := barrier.ParseOpenedMessage(last.Message); ok {
				return int32(m), true
			}
		}
	case BarrierInWorker:
		if b.Record != nil && st.RestartCount == b.Record.Restart+1 {
			return b.Record.Attempt, true
		}
	}
	return 0, false
}

// Stopped reports whether the pod runs no worker of an attempt before n, by what the
// kubelet reports of its containers (and the agent's record of what it opened), never by
// its attempt label (a pod made for attempt n whose barrier a stale agent opened for an
// older one runs that older attempt): its barrier has not opened since the pod last
// (re)started, or last opened for n or later; and no worker container runs.
func (b Barrier) Stopped(n int32) bool {
	if b.Place == BarrierInWorker {
		// Only a container the record names was opened, and the kubelet removes every
		// container of the pod before it starts the next. A recorded container that has
		// ended counts once the status shows the next one, as an init container's pod
		// counts once its barrier runs again; or, sooner, once its agent has recorded
		// that it stopped it for n (the runtime said it had ended). The controller judges
		// the attempt by the statuses it sees once the gang's barrier opens: it reads the
		// end of a container stopped so, still shown then, as the end of the recorded
		// attempt (StoppedWorker), never as a failure of n.
		// A supervising barrier that waits again runs no worker, whatever attempt its
		// stop was for.
		_, gone := b.record()
		return gone || b.Record.Attempt >= n || b.Record.StoppedFor >= n || b.waitsAgain()
	}
	if m, ok := b.Opened(); ok || b.Status != nil && b.Status.State.Terminated != nil {
		return ok && m >= n // opened for n already, or for an older attempt whose workers run, or are about to
	}
	for _, cs := range b.pod.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return false
		}
	}
	return true
}

// StoppedWorker reports whether the status shows the end of a worker container that its
// node agent stopped for a later attempt (the record's StoppedFor): the container the record
// names, terminated. That end is the recorded attempt's, not a failure of the later one. A
// supervising barrier's stop ends no container, save where the agent could not reach its
// socket and stopped the container through the runtime (inplace.Restarter.StopOldWorkers),
// which the kubelet then restarts: that container's end is read here.
func (b Barrier) StoppedWorker() bool {
	if b.Place != BarrierInWorker || b.Record == nil || b.Record.StoppedFor <= b.Record.Attempt {
		return false
	}
	current, _ := b.record()
	return current && b.Status.State.Terminated != nil
}

// EndedBeforeRecord reports whether the status shows the end of a worker container older than
// the one its node agent's record names (the record's restart above the status's restart
// count): the worker ended on its own, the kubelet started the pod's next container, and the
// agent recorded that one's open before the kubelet's status showed its start. That end is
// an earlier container's, never a failure of the attempt the record opened (seen on the
// real nodes: a kept worker that died of its coordinator's loss just before its agent's stop
// failed the attempt it was restarted for).
func (b Barrier) EndedBeforeRecord() bool {
	return b.Place == BarrierInWorker && b.Record != nil && b.Status != nil && b.Status.State.Terminated != nil &&
		b.Status.RestartCount < b.Record.Restart
}

// OpenedFor reports whether the barrier has opened for attempt n (or later) and its workers
// run: for a barrier in the worker container, the recorded container runs.
func (b Barrier) OpenedFor(n int32) bool {
	m, ok := b.Opened()
	if b.Place == BarrierInWorker {
		current, _ := b.record()
		return ok && current && b.Status.State.Running != nil && m >= n
	}
	return ok && m >= n
}

// RecordedRunning reports whether the node agent's record says the pod's worker runs attempt
// n (or later) where the kubelet's status does not show it yet: a barrier in the worker
// container that the agent opened for n, its container running as the status shows it, or
// a container the status does not show yet (the agent opens on the runtime's start event,
// the kubelet reports the start after its relist and a status write: on a node starting 16
// pods, 2-3 s later). Not for a container the status shows ended, or one that waits again.
func (b Barrier) RecordedRunning(n int32) bool {
	if b.Place != BarrierInWorker || b.Record == nil || b.Record.Attempt < n || b.waitsAgain() {
		return false
	}
	switch current, gone := b.record(); {
	case gone:
		return false
	case current:
		return b.Status.State.Running != nil
	}
	return true // the status lags the record
}

// WorkerStart is when the worker in pod's container name, which started at started, began
// its current attempt: the one definition of "this worker's life" that every rule reads
// (fatal evidence, a node's shutdown announcement and GPU health, progress). Where the
// barrier is that container's entrypoint the container starts as the barrier, which waits,
// and a supervising one keeps it across attempts: there the worker's incarnation starts at
// the agent's recorded open of the attempt the record names (BarrierRecord.OpenedAt), when
// the record names that container and says when; elsewhere at the container's start.
func (b Barrier) WorkerStart(name string, started time.Time) time.Time {
	if b.Place != BarrierInWorker || name != b.Container || b.Record == nil || b.Record.OpenedAt == "" {
		return started
	}
	if current, _ := b.record(); !current {
		return started
	}
	opened, err := time.Parse(time.RFC3339Nano, b.Record.OpenedAt)
	if err != nil || opened.Before(started) {
		return started
	}
	return opened
}

// Worker is a container of a pod that runs the pod's worker, and when its current attempt
// began (Barrier.WorkerStart).
type Worker struct {
	Container string
	Since     time.Time
}

// RunningWorkers are the containers of pod that run a worker, in the status's order, each
// with when its current attempt began (the pod's start, else its creation, where the kubelet
// has not said when the container started). Init containers are not workers (a barrier
// among them runs before the worker), nor is a barrier in the worker's container that
// waits: a gang held at its barriers runs no worker, and its silence there is no stall.
func RunningWorkers(pod *corev1.Pod) []Worker {
	var out []Worker
	var b Barrier
	barrierRead := false
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		r := cs.State.Running
		if r == nil {
			continue
		}
		if !barrierRead {
			b, barrierRead = BarrierOf(pod), true
		}
		if b.Place == BarrierInWorker && cs.Name == b.Container {
			if _, waits := b.Waiting(); waits {
				continue
			}
		}
		at := r.StartedAt.Time
		if at.IsZero() {
			at = PodStart(pod)
		}
		out = append(out, Worker{Container: cs.Name, Since: b.WorkerStart(cs.Name, at)})
	}
	return out
}

// PodStart is when the kubelet started pod (its status's startTime), else its creation.
func PodStart(pod *corev1.Pod) time.Time {
	if t := pod.Status.StartTime; t != nil && !t.IsZero() {
		return t.Time
	}
	return pod.CreationTimestamp.Time
}

// Running is the attempt whose workers pod runs, or last ran: the attempt it was made for,
// or, for a pod that restarts in place, the later one its barrier last opened for (the
// barrier's termination message, which the kubelet keeps in the status while those workers
// run and until the pod restarts; or the node agent's record of the open). ok is false when
// the pod has no attempt label.
func Running(pod *corev1.Pod) (n int32, ok bool) {
	n, ok = Number(pod)
	if !ok {
		return 0, false
	}
	if m, opened := BarrierOf(pod).Opened(); opened && m > n {
		n = m
	}
	return n, true
}
