package nodeagent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
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
		"no endpoint":         "",
		"no socket":           "unix://" + filepath.Join(t.TempDir(), "none.sock"),
		"not a unix endpoint": "tcp://127.0.0.1:1",
		"a socket but no CRI": "unix://" + notCRI,
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, reason, message := dialRestarter(ctx, endpoint, slog.New(slog.NewTextHandler(&out, nil)))
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
