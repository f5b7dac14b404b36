package nodeagent

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

// episodes starts the trace of every fault episode one signal causes: one per run, since
// each run's controller restarts (or fails) it on its own. The Writer asks for the episode of
// a pod's run when it writes the evidence and puts the episode's reserved root, as a
// traceparent, into the same patch; once the evidence is on the pods, record emits the
// detect span of each run whose pods got it. The controller ends the episode (pkg/tracing).
//
// Detect ends with the run's first evidence written, not its last: from then on the
// controller can act (a shutdown fails the first worker it stops, and the controller decides
// on that one), and the agent marks the run's other pods alongside the decision and the
// teardown. The episode's phases follow its critical path, so they do not overlap.
type episodes struct {
	tracing *tracing.Provider

	mu   sync.Mutex
	runs map[types.NamespacedName]*episode
}

type episode struct {
	root trace.SpanContext
	// pods counts the pods of the run whose evidence carries root; first is when the first
	// of them was written.
	pods  int
	first time.Time
}

func newEpisodes(p *tracing.Provider) *episodes {
	return &episodes{tracing: p, runs: map[types.NamespacedName]*episode{}}
}

type episodesKey struct{}

// withEpisodes makes the evidence written under ctx start the episodes of e. Without it
// (or with tracing disabled) evidence carries no traceparent.
func withEpisodes(ctx context.Context, e *episodes) context.Context {
	if e == nil || !e.tracing.Enabled() {
		return ctx
	}
	return context.WithValue(ctx, episodesKey{}, e)
}

func episodesFrom(ctx context.Context) *episodes {
	e, _ := ctx.Value(episodesKey{}).(*episodes)
	return e
}

func runOf(pod *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: pod.Namespace, Name: pod.Labels[v1alpha1.LabelRun]}
}

// root is the reserved root of the episode of pod's run (invalid when e is nil).
func (e *episodes) root(pod *corev1.Pod) trace.SpanContext {
	if e == nil {
		return trace.SpanContext{}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	key := runOf(pod)
	ep, ok := e.runs[key]
	if !ok {
		ep = &episode{root: e.tracing.NewEpisode()}
		e.runs[key] = ep
	}
	return ep.root
}

// written notes that pod's evidence, with its run's traceparent, was written at t.
func (e *episodes) written(pod *corev1.Pod, t time.Time) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ep := e.runs[runOf(pod)]; ep != nil {
		ep.pods++
		if ep.first.IsZero() || t.Before(ep.first) {
			ep.first = t
		}
	}
}

// record emits a detect span, from the signal to the first evidence written, for every run
// whose pods carry its episode. A run none of whose pods took this evidence (they carried an
// earlier one, which wins) has no episode here: its root would never be recorded.
func (e *episodes) record(ctx context.Context, ev v1alpha1.FaultEvidence, detectedAt time.Time) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for run, ep := range e.runs {
		if ep.pods == 0 {
			continue
		}
		attrs := []attribute.KeyValue{
			tracing.KeyRun.String(run.Name),
			tracing.KeyNamespace.String(run.Namespace),
			tracing.KeyNode.String(ev.Node),
			tracing.KeyCause.String(string(ev.Cause)),
			tracing.KeyClass.String(string(ev.Cause.Class())),
			tracing.KeySource.String(ev.Source),
			tracing.KeyPods.Int(ep.pods),
		}
		if g := ev.GPU; g != nil {
			attrs = append(attrs, tracing.KeyGPUUUID.String(g.UUID), tracing.KeyGPUIndex.Int(g.Index))
			if g.XID != 0 {
				attrs = append(attrs, tracing.KeyXID.Int64(int64(g.XID)))
			}
		}
		e.tracing.Emit(ctx, ep.root, tracing.Span{
			Name: tracing.SpanDetect, Start: detectedAt, End: ep.first, Attributes: attrs,
		})
	}
}
