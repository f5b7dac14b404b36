package realoutput

import (
	"testing"
	"time"
)

// Every recording loads with an exit code for each worker log, and the times its output
// tells: the JAX gang's aborts to the microsecond, in the same millisecond.
func TestRecordings(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(exitCodes) {
		t.Fatalf("%d recordings, want %d (testdata/frameworks and exitCodes disagree)", len(all), len(exitCodes))
	}
	for _, r := range all {
		for _, w := range r.Workers {
			if w.Log == "" || len(w.Lines) == 0 {
				t.Errorf("%s w%d: empty", r.Name, w.Index)
			}
		}
	}
	raises, err := Load("jax-0.11.2-cpu-worker2-raises")
	if err != nil {
		t.Fatal(err)
	}
	day := RecordedOn
	if got, want := raises.Start(), day.Add(2*time.Hour+26*time.Minute+36*time.Second); !got.Equal(want) {
		t.Errorf("the gang started at %s, want %s (its first DEVCHECK line)", got, want)
	}
	for i, want := range []time.Duration{167436, 167439, 167487, 167572} {
		at := day.Add(2*time.Hour + 26*time.Minute + 50*time.Second + want*time.Microsecond)
		if w := raises.Workers[i]; !w.ExitedAt.Equal(at) || w.ExitCode != 134 {
			t.Errorf("w%d exited %d at %s, want 134 at %s (its abort's F line)", i, w.ExitCode, w.ExitedAt.Format(time.StampMicro), at.Format(time.StampMicro))
		}
	}
	if _, err := Load("nonesuch"); err == nil {
		t.Error("Load of an unknown recording: no error")
	}
}
