package fleet

import (
	"math"
	"testing"
	"time"
)

// assumptions are round figures for the tests: what they check holds for any.
var assumptions = Assumptions{
	CheckpointInterval: 30 * time.Minute,
	HangTimeout:        10 * time.Minute,
	HangShare:          0.5,
	Resume:             5 * time.Minute,
	CrashAfter:         5 * time.Minute,
	Fix:                time.Hour,
}

// TestFleetReplayMatchesItsInputs (issue 61): over a long horizon the simulated interruptions
// of each kind come at the rate the mix gives them (within 5%); a system that loses no time
// to detection, recovery or resume has the goodput of the lost work alone, 1 minus half a
// checkpoint interval per interruption; with no checkpoint lost either, the goodput is 1;
// and a system that waits longer for each step loses more.
func TestFleetReplayMatchesItsInputs(t *testing.T) {
	const years = 100
	horizon := years * Llama3.Horizon
	free := System{Name: "instant"}
	r := Replay(Llama3, horizon, free, Assumptions{CheckpointInterval: assumptions.CheckpointInterval}, 1)
	total := 0
	for _, k := range Kinds {
		want := float64(years * Llama3.Count(k))
		got := float64(r.Interruptions[k])
		if want == 0 {
			t.Fatalf("the mix has no interruption of kind %s", k)
		}
		if math.Abs(got-want)/want > 0.05 {
			t.Errorf("%s: %v interruptions over %d horizons, want %v within 5%%", k, got, years, want)
		}
		total += r.Interruptions[k]
	}
	if r.Lost.Detect != 0 || r.Lost.Recover != 0 || r.Lost.Wasted != 0 || r.Lost.Fix != 0 {
		t.Errorf("a system that loses no time lost %+v", r.Lost)
	}
	if want := 1 - float64(r.Lost.Redo)/float64(horizon); math.Abs(r.Goodput-want) > 1e-12 {
		t.Errorf("goodput %v, want 1 - the lost work = %v", r.Goodput, want)
	}
	// Half a checkpoint interval per interruption, on average.
	redo := float64(total) * float64(assumptions.CheckpointInterval) / 2
	if got := float64(r.Lost.Redo); math.Abs(got-redo)/redo > 0.05 {
		t.Errorf("lost work %v, want half an interval per interruption, %v, within 5%%", r.Lost.Redo, time.Duration(redo))
	}
	if r := Replay(Llama3, horizon, free, Assumptions{}, 1); r.Goodput != 1 {
		t.Errorf("no time lost anywhere: goodput %v, want 1", r.Goodput)
	}

	// Each step a system waits costs it: detection, recovery, and a hang without evidence.
	base := System{Name: "base", Detect: time.Second, NodeLost: 40 * time.Second, Recover: 100 * time.Second, Evidence: []Kind{KindGPU}}
	slower := base
	slower.Recover = 300 * time.Second
	blind := base
	blind.Evidence = nil
	blind.NodeLost = 340 * time.Second
	blind.ApplicationRestarts = 3
	b := Replicate(Llama3, base, assumptions, 20)
	for _, worse := range []System{slower, blind} {
		if w := Replicate(Llama3, worse, assumptions, 20); w.Mean >= b.Mean {
			t.Errorf("%+v: goodput %.4f, not below the base's %.4f", worse, w.Mean, b.Mean)
		}
	}
	if b.Low > b.Mean || b.High < b.Mean || b.High-b.Low <= 0 {
		t.Errorf("the confidence interval [%v, %v] does not hold the mean %v", b.Low, b.High, b.Mean)
	}
	// Checkpointing on notice saves the planned moves' lost work, and nothing else.
	notice := base
	notice.CheckpointOnNotice = true
	n := Replay(Llama3, horizon, notice, assumptions, 7)
	without := Replay(Llama3, horizon, base, assumptions, 7)
	if n.Lost.Redo >= without.Lost.Redo || n.Interruptions[KindPlanned] != without.Interruptions[KindPlanned] {
		t.Errorf("checkpoint on notice: lost work %v against %v without", n.Lost.Redo, without.Lost.Redo)
	}
}

// TestReplayIsDeterministic: a seed is a replay; another seed another.
func TestReplayIsDeterministic(t *testing.T) {
	sys := System{Detect: time.Second, Recover: time.Minute}
	a := Replay(Llama3, Llama3.Horizon, sys, assumptions, 3)
	b := Replay(Llama3, Llama3.Horizon, sys, assumptions, 3)
	c := Replay(Llama3, Llama3.Horizon, sys, assumptions, 4)
	if a.Goodput != b.Goodput || a.Lost != b.Lost {
		t.Errorf("seed 3 twice: %v and %v", a, b)
	}
	if a.Goodput == c.Goodput {
		t.Errorf("seeds 3 and 4 gave the same replay: %v", a.Goodput)
	}
}
