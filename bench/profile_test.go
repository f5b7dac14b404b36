package main

import (
	"testing"

	"github.com/google/pprof/profile"
)

// cpuIn counts a sample as the policies' when any frame of its stack is theirs, not only its
// leaf: the CEL conversions they pay for run in apimachinery's code, called from theirs.
func TestCPUInCountsWholeStacks(t *testing.T) {
	fn := func(id uint64, name string) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: &profile.Function{ID: id, Name: name}}}}
	}
	convert := fn(1, "k8s.io/apimachinery/pkg/runtime.(*unstructuredConverter).ToUnstructured")
	validate := fn(2, admissionPolicyPackage+"validating.(*dispatcher).Dispatch")
	serve := fn(3, "k8s.io/apiserver/pkg/endpoints/handlers.UpdateResource.func1")
	watch := fn(4, "k8s.io/apiserver/pkg/storage/cacher.(*Cacher).dispatchEvents")
	prof := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{convert, validate, serve}, Value: []int64{3, 30}},
			{Location: []*profile.Location{serve}, Value: []int64{5, 50}},
			{Location: []*profile.Location{watch}, Value: []int64{2, 20}},
		},
	}
	in, total, err := cpuIn(prof, admissionPolicyPackage)
	if err != nil {
		t.Fatal(err)
	}
	if in != 30 || total != 100 {
		t.Errorf("cpuIn: %d of %d ns, want 30 of 100 (the cpu column, the whole stack)", in, total)
	}
	if _, _, err := cpuIn(&profile.Profile{SampleType: []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}}}, admissionPolicyPackage); err == nil {
		t.Error("a profile without CPU samples: no error")
	}
}
