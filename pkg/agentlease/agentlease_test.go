package agentlease

import (
	"maps"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestHeartbeatIsAnAgentsOwn: a Lease is read as node's heartbeat only when it is the one its
// agent writes (its name, its holder, the heartbeat label, a renewal), and it is alive within
// its duration.
func TestHeartbeatIsAnAgentsOwn(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	l := New("gpu-1", t0, Duration)
	hb := Heartbeat(l, "gpu-1")
	if hb == nil || !hb.RenewedAt.Equal(t0) || hb.Duration != 40*time.Second {
		t.Fatalf("Heartbeat(New) = %+v, want renewed at %v for 40 s", hb, t0)
	}
	if !Alive(hb, t0.Add(39*time.Second)) || Alive(hb, t0.Add(40*time.Second)) || Alive(nil, t0) {
		t.Errorf("Alive: want true within 40 s of the renewal, false at 40 s and for no heartbeat")
	}
	Renew(l, "gpu-1", t0.Add(10*time.Second), Duration)
	if hb := Heartbeat(l, "gpu-1"); !hb.RenewedAt.Equal(t0.Add(10*time.Second)) || !l.Spec.AcquireTime.Time.Equal(t0) {
		t.Errorf("renewed: %+v, acquired %v; want the renewal's time and the first acquisition kept", hb, l.Spec.AcquireTime)
	}
	for name, mut := range map[string]func(){
		"another node's":   func() { l.Name = "gpu-2" },
		"another holder":   func() { l.Spec.HolderIdentity = ptr.To("gpu-2") },
		"not labelled":     func() { l.Labels = nil },
		"never renewed":    func() { l.Spec.RenewTime = nil },
		"without duration": func() { l.Spec.LeaseDurationSeconds = nil },
	} {
		l = New("gpu-1", t0, Duration)
		mut()
		if hb := Heartbeat(l, "gpu-1"); hb != nil {
			t.Errorf("%s Lease read as gpu-1's heartbeat: %+v", name, hb)
		}
	}
}

// TestRecordsAreTheHeartbeatsOwn: the barrier records on a heartbeat read back as written,
// none on a Lease that is not node's heartbeat, and none that do not parse.
func TestRecordsAreTheHeartbeatsOwn(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	l := New("gpu-1", t0, Duration)
	recs := map[types.UID]v1alpha1.BarrierRecord{"uid-a": {ContainerID: "c1", Attempt: 2, StoppedFor: 3}, "uid-b": {ContainerID: "c2", Restart: 1, Attempt: 3}}
	if err := SetRecords(l, recs); err != nil {
		t.Fatal(err)
	}
	if got := Records(l, "gpu-1"); !maps.Equal(got, recs) {
		t.Errorf("Records = %v, want %v", got, recs)
	}
	if got := Records(l, "gpu-2"); got != nil {
		t.Errorf("gpu-1's Lease read for gpu-2: %v", got)
	}
	l.Spec.HolderIdentity = ptr.To("gpu-2")
	if got := Records(l, "gpu-1"); got != nil {
		t.Errorf("a Lease gpu-1 does not hold read as its records: %v", got)
	}
	l = New("gpu-1", t0, Duration)
	l.Annotations = map[string]string{v1alpha1.AnnotationBarrierRecords: "{not json"}
	if got := Records(l, "gpu-1"); got != nil {
		t.Errorf("records that do not parse: %v", got)
	}
	if err := SetRecords(l, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Annotations[v1alpha1.AnnotationBarrierRecords]; ok {
		t.Error("SetRecords(nil) left the annotation")
	}
}
