package nodeagent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
)

// A node whose runtime the agent cannot reach has no in-place restart, and says so; the
// agent runs on (dialRestarter returns nil rather than an error).
func TestDialRestarterFailsSoft(t *testing.T) {
	notCRI := filepath.Join(t.TempDir(), "not-cri.sock")
	ln, err := net.Listen("unix", notCRI)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close() // a socket that speaks no CRI
		}
	}()
	for name, endpoint := range map[string]string{
		"none":                inplace.EndpointNone,
		"none found":          "",
		"no socket":           "unix://" + filepath.Join(t.TempDir(), "none.sock"),
		"not a unix endpoint": "tcp://127.0.0.1:1",
		"a socket but no CRI": "unix://" + notCRI,
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, reason, message := dialRestarter(ctx, endpoint, t.TempDir(), slog.New(slog.NewTextHandler(&out, nil)))
			if r != nil {
				r.Close()
				t.Fatalf("dialRestarter(%q) = a restarter, want none", endpoint)
			}
			if reason != v1alpha1.InPlaceReasonNoRuntime || message == "" {
				t.Errorf("condition reason %q message %q: want %s and why", reason, message, v1alpha1.InPlaceReasonNoRuntime)
			}
			if !strings.Contains(out.String(), "in-place restart off on this node") {
				t.Errorf("log %q: want it to say in-place restart is off", out.String())
			}
		})
	}
}

// The node says whether its agent restarts pods in place; an agent restarted with the same
// answer writes nothing, a changed answer is written, and the GPU condition beside it stays.
func TestMarkInPlaceReady(t *testing.T) {
	n := makeNode()
	n.Status.Conditions = []corev1.NodeCondition{{Type: v1alpha1.NodeConditionGPUHealthy, Status: corev1.ConditionTrue, Reason: v1alpha1.GPUReasonHealthy}}
	w, client := newTestWriter(t, false, n)
	ctx := context.Background()
	cond := func() (in, gpu *corev1.NodeCondition) {
		t.Helper()
		got, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range got.Status.Conditions {
			switch c.Type {
			case v1alpha1.NodeConditionInPlaceReady:
				in = &got.Status.Conditions[i]
			case v1alpha1.NodeConditionGPUHealthy:
				gpu = &got.Status.Conditions[i]
			}
		}
		return in, gpu
	}
	steps := []struct {
		ready           bool
		reason, message string
		patches         int
	}{
		{true, v1alpha1.InPlaceReasonRuntimeReady, "containerd 2.2.9 at unix:///run/containerd/containerd.sock", 1},
		{true, v1alpha1.InPlaceReasonRuntimeReady, "containerd 2.2.9 at unix:///run/containerd/containerd.sock", 1}, // unchanged: no write
		{false, v1alpha1.InPlaceReasonNoRuntime, "no container runtime: stat /run/containerd/containerd.sock: no such file", 2},
	}
	for i, s := range steps {
		if err := w.MarkInPlaceReady(ctx, s.ready, s.reason, s.message, t0); err != nil {
			t.Fatal(err)
		}
		in, gpu := cond()
		want := corev1.ConditionFalse
		if s.ready {
			want = corev1.ConditionTrue
		}
		if in == nil || in.Status != want || in.Reason != s.reason || in.Message != s.message {
			t.Errorf("step %d: InPlaceReady %+v, want %s %s %q", i, in, want, s.reason, s.message)
		}
		if gpu == nil || gpu.Status != corev1.ConditionTrue {
			t.Errorf("step %d: GPUHealthy %+v, want it kept", i, gpu)
		}
		if ps := patches(client); len(ps) != s.patches || ps[len(ps)-1].GetSubresource() != "status" {
			t.Errorf("step %d: %d patches, want %d (of nodes/status)", i, len(ps), s.patches)
		}
	}
}

// The in-place restarter decides from the agent's informer's slim pods: they must decide as
// the full pods do.
func TestSlimPodDecidesAsTheFullPod(t *testing.T) {
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "r-0", UID: "u"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptrTo[int64](45),
			InitContainers:                []corev1.Container{{Name: v1alpha1.BarrierContainer, Image: "barrier"}},
			Containers:                    []corev1.Container{{Name: "worker", Image: "trainer", Env: []corev1.EnvVar{{Name: "X", Value: "y"}}}},
		},
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	opened := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "attempt=1"}}
	for name, st := range map[string]corev1.PodStatus{
		"old workers": {Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer, State: opened}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://w1", State: running}}},
		"at the barrier": {Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer, State: running}}},
	} {
		p := full.DeepCopy()
		p.Status = st
		got, err := slimPod(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		slim := got.(*corev1.Pod)
		if want, got := inplace.Decide(p, 2, true), inplace.Decide(slim, 2, true); !reflect.DeepEqual(want, got) || got.Action == inplace.ActionNone {
			t.Errorf("%s: slim pod decides %+v, the full one %+v", name, got, want)
		}
		if *slim.Spec.TerminationGracePeriodSeconds != 45 {
			t.Errorf("%s: slim pod's grace period %v, want 45 (the old workers' time to stop)", name, slim.Spec.TerminationGracePeriodSeconds)
		}
	}
}
