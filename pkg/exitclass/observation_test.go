package exitclass

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func TestCompileHintsErrors(t *testing.T) {
	cases := map[string]struct {
		patterns []HintPattern
		want     []string // substrings of the error
	}{
		"bad regular expression": {
			patterns: []HintPattern{
				{Pattern: `fine`, Cause: v1alpha1.CausePeerFailure, Source: "jax"},
				{Pattern: `heartbeat (timeout`, Cause: v1alpha1.CausePeerFailure, Source: "jax"},
			},
			want: []string{"hint 1", `"jax"`, `pattern "heartbeat (timeout"`, "missing closing )"},
		},
		"empty pattern": {
			patterns: []HintPattern{{Pattern: "", Cause: v1alpha1.CauseAppExit, Source: "tensorflow"}},
			want:     []string{"hint 0", `"tensorflow"`, "empty pattern"},
		},
		"Unknown cause": {
			patterns: []HintPattern{{Pattern: "x", Cause: v1alpha1.CauseUnknown, Source: "jax"}},
			want:     []string{`pattern "x"`, `cause "Unknown" is not a hint cause`},
		},
		"LimitExceeded, which only the kubelet's eviction proves": {
			patterns: []HintPattern{{Pattern: "No space left on device", Cause: v1alpha1.CauseLimitExceeded, Source: "jax"}},
			want:     []string{`cause "LimitExceeded" is the kubelet's eviction`, "use AppExit"},
		},
		"cause that does not exist": {
			patterns: []HintPattern{{Pattern: "x", Cause: "Cosmic", Source: "jax"}},
			want:     []string{`cause "Cosmic" is not a hint cause`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hints, err := CompileHints(tc.patterns)
			if err == nil {
				t.Fatalf("CompileHints() = %v, want an error", hints)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestCompileHintsKeepsOrder(t *testing.T) {
	hints, err := CompileHints([]HintPattern{
		{Pattern: `a`, Cause: v1alpha1.CausePeerFailure, Source: "jax"},
		{Pattern: `b`, Cause: v1alpha1.CauseGPUFault, Source: "nccl"},
		{Pattern: `c`, Cause: v1alpha1.CauseOOMKilled, Source: "tensorflow"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hints {
		got = append(got, h.Source+":"+string(h.Cause)+":"+h.Pattern.String())
	}
	want := "jax:PeerFailure:a nccl:GPUFault:b tensorflow:OOMKilled:c"
	if strings.Join(got, " ") != want {
		t.Errorf("hints %v, want %s", got, want)
	}
	if hints, err := CompileHints(nil); err != nil || len(hints) != 0 {
		t.Errorf("CompileHints(nil) = %v, %v; want none, nil", hints, err)
	}
}

// TestUnmonitored: a worker that asks for GPUs on a node whose agent says it does not watch
// them is named, with why; one that asks for none, or whose node's agent watches or says
// nothing, is not.
func TestUnmonitored(t *testing.T) {
	gpuWorker := func(node string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "w", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("1")}}}}}}
	}
	cpuWorker := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "blind", Containers: []corev1.Container{{Name: "w"}}}}
	nodes := map[string]NodeFacts{
		"blind":   {Agent: &Heartbeat{NoGPUMonitoring: "NVMLNotFound: libnvidia-ml not found"}},
		"watched": {Agent: &Heartbeat{}},
		"silent":  {},
	}
	got := Unmonitored([]*corev1.Pod{gpuWorker("blind"), cpuWorker, gpuWorker("watched"), gpuWorker("silent"), gpuWorker("")}, nodes)
	if len(got) != 1 || got[0] != "blind (NVMLNotFound: libnvidia-ml not found)" {
		t.Errorf("Unmonitored = %q, want only the GPU worker's blind node, with why", got)
	}
}
