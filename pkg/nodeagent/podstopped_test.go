package nodeagent

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
)

func TestMarkPodStopped(t *testing.T) {
	shutdown := ShutdownEvidence(node, t0)
	stopAt := func(d time.Duration) inplace.SandboxStop {
		return inplace.SandboxStop{Namespace: "ml", Name: "r-0", UID: "uid-r-0", At: t0.Add(d)}
	}
	stopped := shutdown
	stopped.PodStoppedAt = formatTime(t0.Add(time.Second))
	gpu := v1alpha1.FaultEvidence{Source: v1alpha1.EvidenceSourceNVMLEvent, Node: node, Cause: v1alpha1.CauseGPUFault, DetectedAt: formatTime(t0)}
	for name, tc := range map[string]struct {
		pod   *podBuilder
		stop  inplace.SandboxStop
		wrote bool
	}{
		"stopped after the announcement": {makePod("r-0").run("r").evidence(shutdown), stopAt(time.Second), true},
		"stopped before it":              {makePod("r-0").run("r").evidence(shutdown), stopAt(-time.Second), false},
		"no evidence":                    {makePod("r-0").run("r"), stopAt(time.Second), false},
		"a GPU's evidence":               {makePod("r-0").run("r").evidence(gpu), stopAt(time.Second), false},
		"evidence anyone could write":    {makePod("r-0").run("r").annotate(shutdown), stopAt(time.Second), false},
		"another pod of the name": {makePod("r-0").run("r").evidence(shutdown), func() inplace.SandboxStop {
			s := stopAt(time.Second)
			s.UID = "uid-earlier"
			return s
		}(), false},
		"recorded already": {makePod("r-0").run("r").evidence(stopped), stopAt(2 * time.Second), false},
	} {
		t.Run(name, func(t *testing.T) {
			w, client := newTestWriter(t, false, tc.pod.obj())
			wrote, err := w.MarkPodStopped(context.Background(), tc.stop)
			if err != nil || wrote != tc.wrote {
				t.Fatalf("MarkPodStopped = %v, %v; want %v", wrote, err, tc.wrote)
			}
			if !tc.wrote {
				if n := len(patches(client)); n != 0 {
					t.Errorf("%d patches, want none", n)
				}
				return
			}
			var got v1alpha1.FaultEvidence
			if err := json.Unmarshal([]byte(getPod(t, client, "r-0").Annotations[v1alpha1.AnnotationFaultEvidence]), &got); err != nil {
				t.Fatal(err)
			}
			if got != stopped {
				t.Errorf("evidence %+v, want %+v", got, stopped)
			}
			// The first stop stays.
			if again, err := w.MarkPodStopped(context.Background(), stopAt(3*time.Second)); again || err != nil {
				t.Errorf("a second stop: wrote %v, %v; want nothing written", again, err)
			}
		})
	}
}
