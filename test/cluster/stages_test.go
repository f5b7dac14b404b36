package cluster

import (
	"strings"
	"testing"
)

// The kwok configuration and the heartbeat stage leave alone what StopNode labels: the label
// is spelled in YAML, so a rename of LabelStopped would otherwise let kwok go on playing a
// stopped node's pods.
func TestStagesLeaveAStoppedNodeAlone(t *testing.T) {
	for file, want := range map[string]string{
		"stages/kwok-controller.yaml": "disregardStatusWithLabelSelector: " + LabelStopped + "\n",
		"stages/node-heartbeat.yaml":  `.metadata.labels["` + LabelStopped + `"]`,
	} {
		b, err := stages.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not say %q", file, want)
		}
	}
}
