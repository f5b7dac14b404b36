package nodeagent

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

func withRecord(p *corev1.Pod, rec v1alpha1.BarrierRecord) *corev1.Pod {
	raw, _ := json.Marshal(rec)
	p.Annotations = map[string]string{v1alpha1.AnnotationBarrierRecord: string(raw)}
	return p
}

// The agent's stop of a recorded container lands in the pod's record (StoppedFor), the
// rest of the record as it was; once there, or where the record names another container or
// a later attempt, nothing is written. A conflict (the kubelet wrote the pod meanwhile) reads
// the pod again and writes against it.
func TestRecordStopped(t *testing.T) {
	ctx := context.Background()
	opened := v1alpha1.BarrierRecord{ContainerID: "c0", Restart: 1, Attempt: 1}
	pod := withRecord(makePod("llm-0").run("llm").onNode(node).obj(), opened)
	w, client := newTestWriter(t, false, pod)
	conflicts := 1
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "llm-0", nil)
		}
		return false, nil, nil
	})
	if err := w.RecordStopped(ctx, pod, "c0", 2, nil); err != nil {
		t.Fatal(err)
	}
	got := getPod(t, client, "llm-0")
	want := opened
	want.StoppedFor = 2
	if rec := attempt.BarrierRecord(got); rec == nil || *rec != want {
		t.Fatalf("record %+v, want %+v", rec, want)
	}
	if n := len(patches(client)); n != 2 {
		t.Errorf("%d patches, want 2 (a conflict, then the write)", n)
	}
	for name, c := range map[string]struct {
		pod *corev1.Pod
		id  string
		n   int
	}{
		"recorded already":            {got, "c0", 2},
		"the record names another":    {got, "c1", 2},
		"recorded for the attempt":    {withRecord(got.DeepCopy(), v1alpha1.BarrierRecord{ContainerID: "c0", Attempt: 2}), "c0", 2},
		"no record":                   {makePod("llm-0").run("llm").onNode(node).obj(), "c0", 2},
		"stopped for a later one yet": {withRecord(got.DeepCopy(), v1alpha1.BarrierRecord{ContainerID: "c0", Attempt: 1, StoppedFor: 3}), "c0", 2},
	} {
		before := len(patches(client))
		if err := w.RecordStopped(ctx, c.pod, c.id, c.n, nil); err != nil || len(patches(client)) != before {
			t.Errorf("%s: error %v, %d patches; want nothing written", name, err, len(patches(client))-before)
		}
	}
	if err := w.RecordStopped(ctx, withRecord(makePod("llm-1").run("llm").onNode("elsewhere").obj(), opened), "c0", 2, nil); err == nil {
		t.Error("a pod of another node: recorded, want refused")
	}
}
