package cli

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

func TestRunSpecYAMLLeavesDefaultsToTheAPI(t *testing.T) {
	run, err := RunSpec{
		Name: "llm", Namespace: "research", Framework: "jax", Workers: 16, Image: "train:1", GPUsPerWorker: 8,
		Memory: "64Gi", Env: []string{"B=2", "A=1"}, MaxInfra: ptr.To[int32](3), ExcludeFaultyNodes: true,
		Command: []string{"python", "train.py"},
	}.TrainingRun()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := YAML(&b, run); err != nil {
		t.Fatal(err)
	}
	golden(t, "run-dry-run", b.Bytes())
	// Backoff's fields are not pointers: zeros sent to the API would override its defaults.
	if strings.Contains(b.String(), "backoff") || strings.Contains(b.String(), "status") {
		t.Errorf("the manifest carries what the API must default:\n%s", b.String())
	}
}

func TestRunSpecUsageErrors(t *testing.T) {
	for name, s := range map[string]RunSpec{
		"no name":    {Image: "i", Workers: 1},
		"no image":   {Name: "n", Workers: 1},
		"bad env":    {Name: "n", Image: "i", Workers: 1, Env: []string{"NOVALUE"}},
		"bad cpu":    {Name: "n", Image: "i", Workers: 1, CPU: "lots"},
		"two queues": {Name: "n", Image: "i", Workers: 1, Queue: "a", Labels: []string{"kueue.x-k8s.io/queue-name=b"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.TrainingRun()
			if _, code := Message(err, ""); err == nil || code != ExitUsage {
				t.Errorf("TrainingRun() = %v, want a usage error", err)
			}
		})
	}
}

func TestRunSpecQueue(t *testing.T) {
	run, err := RunSpec{Name: "n", Image: "i", Workers: 2, Queue: "team-a", Labels: []string{"team=a"}}.TrainingRun()
	if err != nil {
		t.Fatal(err)
	}
	if got := run.Labels; got["kueue.x-k8s.io/queue-name"] != "team-a" || got["team"] != "a" {
		t.Errorf("labels %v, want the queue's and --label's", got)
	}
}
