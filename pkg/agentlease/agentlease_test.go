package agentlease

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"
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
