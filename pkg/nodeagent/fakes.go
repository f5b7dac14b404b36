package nodeagent

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// FakeGPUOwners is a GPUOwnerSource for tests.
type FakeGPUOwners struct {
	Owners GPUOwners
	Err    error
}

var _ GPUOwnerSource = &FakeGPUOwners{}

// GPUOwners returns Owners, or Err.
func (f *FakeGPUOwners) GPUOwners(context.Context) (GPUOwners, error) {
	if f.Err != nil {
		return nil, f.Err
	}
	return f.Owners, nil
}

// PodMark is one MarkPod call seen by FakeEvidenceWriter.
type PodMark struct {
	Pod      types.NamespacedName
	Evidence v1alpha1.FaultEvidence
}

// NodeGPUMark is one MarkGPUUnhealthy call seen by FakeEvidenceWriter.
type NodeGPUMark struct {
	Reason, Message string
	At              time.Time
}

// FakeEvidenceWriter records what the Agent asks to write. The *Err fields inject failures;
// MarkErr fails MarkPod for the pods it names.
type FakeEvidenceWriter struct {
	mu sync.Mutex

	Pods        []types.NamespacedName // what RunPods returns
	MarkErr     map[types.NamespacedName]error
	WithdrawErr error
	RunPodsErr  error
	NodeErr     error
	AnnotateErr error
	ClearErr    error

	Marks      []PodMark
	Withdrawn  []types.NamespacedName
	NodeMarks  []NodeGPUMark
	Shutdowns  []time.Time
	ClearCalls int

	// GPUReason and GPUSince are the node's GPUHealthy=False as the fake keeps it ("" while
	// healthy); Healthy records each MarkGPUHealthy that turned it True.
	GPUReason string
	GPUSince  time.Time
	Healthy   []NodeGPUMark
}

var _ EvidenceWriter = &FakeEvidenceWriter{}

// MarkPod records the mark.
func (f *FakeEvidenceWriter) MarkPod(_ context.Context, ref types.NamespacedName, ev v1alpha1.FaultEvidence) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.MarkErr[ref]; err != nil {
		return false, err
	}
	f.Marks = append(f.Marks, PodMark{Pod: ref, Evidence: ev})
	return true, nil
}

// WithdrawPod records the withdrawal.
func (f *FakeEvidenceWriter) WithdrawPod(_ context.Context, ref types.NamespacedName) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.WithdrawErr != nil {
		return false, f.WithdrawErr
	}
	f.Withdrawn = append(f.Withdrawn, ref)
	return true, nil
}

// RunPods returns Pods.
func (f *FakeEvidenceWriter) RunPods(context.Context) ([]types.NamespacedName, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]types.NamespacedName(nil), f.Pods...), f.RunPodsErr
}

// MarkGPUUnhealthy records the node mark.
func (f *FakeEvidenceWriter) MarkGPUUnhealthy(_ context.Context, reason, message string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.NodeErr != nil {
		return f.NodeErr
	}
	f.NodeMarks = append(f.NodeMarks, NodeGPUMark{Reason: reason, Message: message, At: at})
	if f.GPUReason == "" {
		f.GPUReason, f.GPUSince = reason, at
	}
	return nil
}

// MarkGPUHealthy turns the fake node healthy where gone says its reason is over.
func (f *FakeEvidenceWriter) MarkGPUHealthy(_ context.Context, gone func(string, time.Time) bool, message string, at time.Time) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.NodeErr != nil {
		return false, f.NodeErr
	}
	if f.GPUReason == "" || !gone(f.GPUReason, f.GPUSince) {
		return false, nil
	}
	f.Healthy = append(f.Healthy, NodeGPUMark{Reason: f.GPUReason, Message: message, At: at})
	f.GPUReason = ""
	return true, nil
}

// AnnotateShutdown records the announcement.
func (f *FakeEvidenceWriter) AnnotateShutdown(_ context.Context, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.AnnotateErr != nil {
		return f.AnnotateErr
	}
	f.Shutdowns = append(f.Shutdowns, at)
	return nil
}

// ClearShutdown counts the call.
func (f *FakeEvidenceWriter) ClearShutdown(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ClearCalls++
	return f.ClearErr
}

// Snapshot returns copies of what was recorded, safe to read while the agent runs.
func (f *FakeEvidenceWriter) Snapshot() (marks []PodMark, nodeMarks []NodeGPUMark, shutdowns []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]PodMark(nil), f.Marks...), append([]NodeGPUMark(nil), f.NodeMarks...), append([]time.Time(nil), f.Shutdowns...)
}
