package realnode

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
	"github.com/faultline-dev/faultline/test/hops"
)

// apiWatch times what the API shows of a run's pods during a restart, on this process's
// clock (the collector's): when each pod was first seen, bound, its worker's exit reported and
// its shutdown stop written on it, and gone. The hop table's "··" rows, a moved index's way
// from its old pod to its new one's kubelet, are read from it (hops.APIMoments).
type apiWatch struct {
	mu   sync.Mutex
	seen map[types.UID]*apiSeen
	stop context.CancelFunc
}

type apiSeen struct {
	listed                                       bool // there before the watch began: no Made or Bound
	made, bound, exitReported, stopWritten, gone time.Time
	handed                                       time.Time // a spare seen holding an index
	stoppedAt                                    time.Time // the agent's podStoppedAt, its clock
}

// watchAPIMoments starts an apiWatch of run's pods and returns once it has listed them.
func watchAPIMoments(ctx context.Context, c *cluster.Cluster, ns, run string) (*apiWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &apiWatch{seen: map[types.UID]*apiSeen{}, stop: cancel}
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = v1alpha1.LabelRun + "=" + run }))
	inf := f.Core().V1().Pods().Informer()
	observe := func(obj any, gone bool) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			if d, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
				p, ok = d.Obj.(*corev1.Pod)
			}
			if !ok {
				return
			}
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		s := w.seen[p.UID]
		if s == nil {
			s = &apiSeen{made: now}
			w.seen[p.UID] = s
		}
		if p.Spec.NodeName != "" && s.bound.IsZero() {
			s.bound = now
		}
		if _, ok := p.Annotations[v1alpha1.AnnotationWorkerExit]; ok && s.exitReported.IsZero() {
			s.exitReported = now
		}
		if s.stopWritten.IsZero() {
			if fe := v1alpha1.EvidenceOf(p.Annotations); fe != nil && fe.PodStoppedAt != "" {
				s.stopWritten = now
				s.stoppedAt, _ = time.Parse(time.RFC3339Nano, fe.PodStoppedAt)
			}
		}
		if _, held := attempt.Index(p); held && attempt.MadeAsSpare(p) && s.handed.IsZero() {
			s.handed = now
		}
		if gone && s.gone.IsZero() {
			s.gone = now
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { observe(obj, false) },
		UpdateFunc: func(_, obj any) { observe(obj, false) },
		DeleteFunc: func(obj any) { observe(obj, true) },
	})
	if err != nil {
		cancel()
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		cancel()
		return nil, ctx.Err()
	}
	w.mu.Lock()
	for _, s := range w.seen {
		s.listed = true
	}
	w.mu.Unlock()
	return w, nil
}

// moved is the way of the index of a new pod from its old pod (before, by index): zero for an
// index whose pod stayed.
func (w *apiWatch) moved(newPod types.UID, old *corev1.Pod) hops.APIMoments {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, o := w.seen[newPod], w.seen[old.UID]
	if n == nil || o == nil || n == o {
		return hops.APIMoments{}
	}
	m := hops.APIMoments{OldExitReported: o.exitReported, OldStopped: o.stoppedAt, OldStopWritten: o.stopWritten, OldGone: o.gone, Handed: n.handed}
	if !n.listed {
		m.Made, m.Bound = n.made, n.bound
	}
	return m
}
