package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMadeFor: the pods that ran an attempt are labelled with it, or, for an attempt that
// restarted in place, with any attempt since its Job's (a pod keeps the attempt it was made
// for); an attempt that recreated its pods has its own only.
func TestMadeFor(t *testing.T) {
	run := inPlaceRun() // attempt 2 restarted in place in attempt 1's Job
	if got := madeFor(run, 2); !cmp.Equal(got, []string{"1", "2"}) {
		t.Errorf("in-place attempt 2: %v, want [1 2]", got)
	}
	if got := madeFor(run, 1); !cmp.Equal(got, []string{"1"}) {
		t.Errorf("attempt 1: %v, want [1]", got)
	}
	if got := madeFor(runningRun(), 2); !cmp.Equal(got, []string{"2"}) {
		t.Errorf("recreated attempt 2: %v, want [2]", got)
	}
}
