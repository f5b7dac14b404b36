package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
)

var _ inplace.BarrierRecorder = &Records{}

// Pods is what Records asks of the API server: its node's pods, to confirm them before an
// open. coreclient.Client implements it.
type Pods interface {
	ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
}

// Records keeps the barrier records of the node's pods on the agent's heartbeat
// (v1alpha1.AnnotationBarrierRecords) rather than on each pod (Writer.RecordBarrier): what
// the agent records of its node's pods at once, the stops of a restart in place and then
// the opens, is one write of the Lease instead of one a pod. A write waits for the one in
// flight, then carries every record asked for meanwhile. The controller reads a pod with the
// later of its own record and its node's (attempt.WithRecord), and so does the agent
// (Lister).
//
// What a pod's own record had from its resourceVersion precondition, the records keep so:
//   - a record replaces only the one its caller decided on (the pod as read, with the
//     records: Lister): else the caller gets a conflict, as from the API server, and reads
//     the pod again;
//   - an open is recorded only for a pod the API server still has, with the UID read and
//     not being deleted (one list of the node's pods for all the opens of a write): an agent
//     whose informer has not seen a moved index's old pod deleted never opens it.
//
// Records of pods gone from the node's informer are dropped at the next write.
type Records struct {
	hb   *Heartbeat
	kube Pods
	node string
	pods corelisters.PodLister
	log  *slog.Logger
	// gather is how long a write asked for when none is in flight waits for others
	// (recordsGather).
	gather time.Duration

	mu sync.Mutex
	// written are the records on the Lease as last written or read; loaded: read once.
	written map[types.UID]v1alpha1.BarrierRecord
	loaded  bool
	// pending are the records asked for since the write in flight began.
	pending []*recordAsk
	// writing: a write is in flight (its goroutine takes pending when it is done), carrying
	// inFlight asks.
	writing  bool
	inFlight int
}

// recordAsk is one record asked for: rec replaces prev (nil: the pod had none), on the pod
// of uid; open says it records an open (the pod is confirmed first). done gets its outcome.
type recordAsk struct {
	pod  *corev1.Pod
	prev *v1alpha1.BarrierRecord
	rec  v1alpha1.BarrierRecord
	open bool
	// amend, for a stop or a checkpoint's answer: the record is the one the write finds,
	// changed as amend says (it reports whether it changed it: RecordStopped,
	// RecordCheckpoint).
	amend func(*v1alpha1.BarrierRecord) bool
	done  chan error
}

// NewRecords keeps the records of node's pods (pods: the agent's informer) on hb's Lease.
func NewRecords(hb *Heartbeat, kube Pods, node string, pods corelisters.PodLister, log *slog.Logger) *Records {
	return &Records{hb: hb, kube: kube, node: node, pods: pods, log: log, gather: recordsGather, written: map[types.UID]v1alpha1.BarrierRecord{}}
}

// Load reads the records on the Lease, once: those an agent before this one wrote (a restart
// in place that an agent's restart cut in two goes on from them).
func (r *Records) Load(ctx context.Context) error {
	r.mu.Lock()
	loaded := r.loaded
	r.mu.Unlock()
	if loaded {
		return nil
	}
	l, err := r.hb.Read(ctx)
	if err != nil {
		return fmt.Errorf("read the barrier records on node %s's heartbeat: %w", r.node, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.loaded {
		r.written = recordsOn(l, r.node)
		r.loaded = true
	}
	return nil
}

func recordsOn(l *coordinationv1.Lease, node string) map[types.UID]v1alpha1.BarrierRecord {
	recs := agentlease.Records(l, node)
	if recs == nil {
		recs = map[types.UID]v1alpha1.BarrierRecord{}
	}
	return recs
}

// Record is the record of the pod of uid on the Lease, nil if none.
func (r *Records) Record(uid types.UID) *v1alpha1.BarrierRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec, ok := r.written[uid]; ok {
		return &rec
	}
	return nil
}

// Pod is pod read with its record on the Lease, where that is later than its own.
func (r *Records) Pod(pod *corev1.Pod) *corev1.Pod {
	return attempt.WithRecord(pod, r.Record(pod.UID))
}

// RecordBarrier records rec, the open of pod's barrier in its worker container, before the
// agent opens it (inplace.BarrierRecorder): pod is as the agent read it with the records.
func (r *Records) RecordBarrier(ctx context.Context, pod *corev1.Pod, rec v1alpha1.BarrierRecord) error {
	return r.ask(ctx, &recordAsk{pod: pod, prev: attempt.BarrierRecord(pod), rec: rec, open: true})
}

// RecordStopped adds to pod's record that the agent stopped containerID for attempt n
// (inplace.BarrierRecorder), where the record still names that container for an earlier
// attempt when written; else nothing.
func (r *Records) RecordStopped(ctx context.Context, pod *corev1.Pod, containerID string, n int, save *v1alpha1.BarrierSave) error {
	return r.ask(ctx, &recordAsk{pod: pod, amend: func(rec *v1alpha1.BarrierRecord) bool {
		return inplace.AmendStopped(rec, containerID, n, save)
	}})
}

// RecordCheckpoint adds to pod's record the answer ck of the worker of containerID,
// recorded as opened for attempt n, to a checkpoint request (AmendCheckpoint's rule).
func (r *Records) RecordCheckpoint(ctx context.Context, pod *corev1.Pod, containerID string, n int, ck v1alpha1.BarrierCheckpoint) error {
	return r.ask(ctx, &recordAsk{pod: pod, amend: func(rec *v1alpha1.BarrierRecord) bool {
		return inplace.AmendCheckpoint(rec, containerID, n, ck)
	}})
}

// ask queues a and waits for the write that carries it.
func (r *Records) ask(ctx context.Context, a *recordAsk) error {
	if err := r.Load(ctx); err != nil {
		return err
	}
	a.done = make(chan error, 1)
	r.mu.Lock()
	r.pending = append(r.pending, a)
	start := !r.writing
	r.writing = true
	r.mu.Unlock()
	if start {
		// The write outlives a caller that stops waiting: it carries others' records too.
		go r.writeAll(context.WithoutCancel(ctx))
	}
	select {
	case err := <-a.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recordsWriteTimeout bounds one write of the records (a confirmation and a Lease update).
const recordsWriteTimeout = 30 * time.Second

// recordsGather is how long a write asked for when none is in flight waits for the others
// asked for with it: the stops, then the opens, of a node's pods are decided together (one
// change of their run queues them all) and asked for within a few milliseconds of each
// other. Without it the first went alone and the node's others in a second write: at 2,048
// workers on 256 nodes of 8, four Lease writes and two lists of the node's pods a node and
// restart where one worker a node took two and one (2026-12-07-s32-in-place-2048-audit.md).
// It is little beside one write on a loaded API server, which every record waits for. (On
// kwok, where one process plays every node's agent on two starved cores, a node's asks
// spread wider than this and the writes did not fall: 2026-12-08-s34-controller-work-kwok.md.)
const recordsGather = 20 * time.Millisecond

// writeAll writes what is pending, and again while more came meanwhile.
func (r *Records) writeAll(ctx context.Context) {
	if r.gather > 0 {
		<-r.hb.cfg.Clock.After(r.gather)
	}
	for {
		r.mu.Lock()
		batch := r.pending
		r.pending = nil
		r.inFlight = len(batch)
		if len(batch) == 0 {
			r.writing = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, recordsWriteTimeout)
		r.write(wctx, batch)
		cancel()
	}
}

// write writes batch in one update of the Lease and tells each ask its outcome.
func (r *Records) write(ctx context.Context, batch []*recordAsk) {
	live, err := r.confirm(ctx, batch)
	if err != nil {
		for _, a := range batch {
			a.done <- err
		}
		return
	}
	outcome := make([]error, len(batch))
	l, err := r.hb.Update(ctx, func(l *coordinationv1.Lease) error {
		// The Lease as the API server has it: its records are the ones to change (another
		// agent's, after a conflict, count as they are there).
		recs := recordsOn(l, r.node)
		for i, a := range batch {
			outcome[i] = apply(recs, a, live)
		}
		onNode := r.onNode(batch)
		for uid := range recs {
			if onNode != nil && !onNode[uid] {
				delete(recs, uid)
			}
		}
		return agentlease.SetRecords(l, recs)
	})
	if err != nil {
		err = fmt.Errorf("write the barrier records on node %s's heartbeat: %w", r.node, err)
	}
	r.mu.Lock()
	if err == nil {
		r.written = recordsOn(l, r.node)
	}
	r.mu.Unlock()
	for i, a := range batch {
		if err != nil {
			a.done <- err
			continue
		}
		a.done <- outcome[i]
	}
}

// apply changes recs, the records on the Lease, as a asks: the error is a's alone.
func apply(recs map[types.UID]v1alpha1.BarrierRecord, a *recordAsk, live map[types.UID]bool) error {
	uid := a.pod.UID
	var cur *v1alpha1.BarrierRecord
	if rec, ok := recs[uid]; ok {
		cur = &rec
	}
	if own := attempt.BarrierRecord(a.pod); attempt.LaterRecord(own, cur) {
		cur = own
	}
	if !a.open {
		if cur == nil {
			return nil
		}
		next := *cur
		if a.amend(&next) {
			recs[uid] = next
		}
		return nil
	}
	if !live[uid] {
		return apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, a.pod.Namespace+"/"+a.pod.Name,
			errors.New("the API server has the pod no more, or it is being deleted: its barrier is not opened"))
	}
	if attempt.LaterRecord(cur, a.prev) {
		return apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, a.pod.Namespace+"/"+a.pod.Name,
			fmt.Errorf("its barrier record is %+v now, not the one the open was decided on", *cur))
	}
	recs[uid] = a.rec
	return nil
}

// confirm lists the node's pods from the API server where batch holds an open, and says
// which of them are there, not being deleted, by UID.
func (r *Records) confirm(ctx context.Context, batch []*recordAsk) (map[types.UID]bool, error) {
	live := map[types.UID]bool{}
	if !slices.ContainsFunc(batch, func(a *recordAsk) bool { return a.open }) {
		return live, nil
	}
	list, err := r.kube.ListPods(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", r.node).String()})
	if err != nil {
		return nil, fmt.Errorf("confirm the pods of node %s before opening their barriers: %w", r.node, err)
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.DeletionTimestamp == nil {
			live[p.UID] = true
		}
	}
	return live, nil
}

// onNode are the UIDs of the node's pods: in the informer, or asked for now. The records of
// the others are dropped; all are kept when the informer cannot say.
func (r *Records) onNode(batch []*recordAsk) map[types.UID]bool {
	uids := map[types.UID]bool{}
	for _, a := range batch {
		uids[a.pod.UID] = true
	}
	pods, err := r.pods.List(labels.Everything())
	if err != nil {
		return nil
	}
	for _, p := range pods {
		uids[p.UID] = true
	}
	return uids
}

// Lister is pods, each pod read with its record on the Lease (Pod).
func (r *Records) Lister(pods corelisters.PodLister) corelisters.PodLister {
	return ReadingLister(pods, r.Pod)
}

// ReadingLister is pods, each pod given as read makes it (the pods are the cache's: read
// returns pod itself, or a copy).
func ReadingLister(pods corelisters.PodLister, read func(*corev1.Pod) *corev1.Pod) corelisters.PodLister {
	return readingPods{pods: pods, read: read}
}

type readingPods struct {
	pods corelisters.PodLister
	read func(*corev1.Pod) *corev1.Pod
}

func (l readingPods) List(sel labels.Selector) ([]*corev1.Pod, error) {
	pods, err := l.pods.List(sel)
	return l.each(pods), err
}

func (l readingPods) Pods(namespace string) corelisters.PodNamespaceLister {
	return readingNamespace{pods: l.pods.Pods(namespace), l: l}
}

func (l readingPods) each(pods []*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		out[i] = l.read(p)
	}
	return out
}

type readingNamespace struct {
	pods corelisters.PodNamespaceLister
	l    readingPods
}

func (n readingNamespace) List(sel labels.Selector) ([]*corev1.Pod, error) {
	pods, err := n.pods.List(sel)
	return n.l.each(pods), err
}

func (n readingNamespace) Get(name string) (*corev1.Pod, error) {
	p, err := n.pods.Get(name)
	if err != nil {
		return nil, err
	}
	return n.l.read(p), nil
}
