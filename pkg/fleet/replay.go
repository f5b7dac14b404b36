package fleet

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// System is how one way of running the gang meets an interruption.
type System struct {
	Name string
	// Recover is its restart: from its decision to every worker running again (what the bench
	// measures as time to restart, at the largest gang it ran).
	Recover time.Duration
	// Evidence lists the kinds whose hang the system decides on without waiting for the
	// framework's timeout (faultline's node agent reads the GPU's XID); a fault that ends the
	// worker is decided on at once by every system.
	Evidence []Kind
	// Detect is its decision time once a worker has ended or the evidence is in (faultline's
	// settle window; a Job controller's reaction).
	Detect time.Duration
	// NodeLost is its decision time after a host dies: faultline judges the node's pods lost
	// once the node is unreachable and its agent's heartbeat has expired (40 s each); a Job's
	// pods fail only when the taint manager evicts them (their 300 s toleration after that).
	NodeLost time.Duration
	// ApplicationRestarts are the restarts an application failure gets before the system
	// gives up (faultline: none, it is the program's fault; JobSet: maxRestarts; an Indexed
	// Job: its backoff limit).
	ApplicationRestarts int
	// CheckpointOnNotice: a planned move checkpoints first and loses no work.
	CheckpointOnNotice bool
	// HangsEverything: a fault of one worker leaves the others waiting in their collectives
	// until the framework's timeout (a bare Indexed Job replaces only the failed index).
	HangsEverything bool
}

// Assumptions are what the model takes as given, the same for every system.
type Assumptions struct {
	// CheckpointInterval: the run checkpoints this often from each resume, and an
	// interruption loses the work since the last checkpoint (half an interval on average, when
	// interruptions are rarer than checkpoints). Zero: no work is lost.
	CheckpointInterval time.Duration
	// HangTimeout is the framework's timeout on a stalled collective (PyTorch's NCCL
	// watchdog: 10 min by default; 30 min is common).
	HangTimeout time.Duration
	// HangShare is the share of GPU faults whose worker hangs instead of exiting.
	HangShare float64
	// Resume is the time from every worker running to training again: the checkpoint's load
	// and the first steps, after every restart.
	Resume time.Duration
	// CrashAfter is how long a restart of a program that fails on its own runs before it fails
	// again.
	CrashAfter time.Duration
	// Fix is the operator's time to fix the program after an application failure and start
	// the run again.
	Fix time.Duration
}

// Lost is where the time that was not training went.
type Lost struct {
	Detect  time.Duration // fault to decision (a hang's wait for the timeout included)
	Recover time.Duration // the restarts, and the resumes after them
	Redo    time.Duration // the work since the last checkpoint
	Wasted  time.Duration // restarts of a program that fails again
	Fix     time.Duration // the operator's fix of the program
}

// Total is all the time lost.
func (l Lost) Total() time.Duration { return l.Detect + l.Recover + l.Redo + l.Wasted + l.Fix }

// each is l with f applied to every part.
func (l Lost) each(f func(time.Duration) time.Duration) Lost {
	return Lost{Detect: f(l.Detect), Recover: f(l.Recover), Redo: f(l.Redo), Wasted: f(l.Wasted), Fix: f(l.Fix)}
}

// plus is l and o, part by part.
func (l Lost) plus(o Lost) Lost {
	return Lost{Detect: l.Detect + o.Detect, Recover: l.Recover + o.Recover, Redo: l.Redo + o.Redo, Wasted: l.Wasted + o.Wasted, Fix: l.Fix + o.Fix}
}

// Result is one replay.
type Result struct {
	Goodput       float64
	Interruptions map[Kind]int
	Lost          Lost
}

// event is one interruption.
type event struct {
	at   time.Duration
	kind Kind
}

// arrivals draws the mix's interruptions over horizon: each root cause a Poisson process at
// its published rate.
func arrivals(m Mix, horizon time.Duration, rng *rand.Rand) []event {
	var out []event
	for _, r := range m.Rows {
		rate := float64(r.Count) / float64(m.Horizon) // per nanosecond
		if rate == 0 {
			continue
		}
		for t := time.Duration(rng.ExpFloat64() / rate); t < horizon; t += time.Duration(rng.ExpFloat64() / rate) {
			out = append(out, event{at: t, kind: r.Kind})
		}
	}
	slices.SortFunc(out, func(a, b event) int { return int(a.at - b.at) })
	return out
}

// Replay runs the mix over horizon for the system, from seed. The gang trains from the start;
// an interruption while it trains loses the work since the checkpoint and stops it until
// detected, restarted and resumed; one while it is already down only extends that.
func Replay(m Mix, horizon time.Duration, sys System, a Assumptions, seed uint64) Result {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	res := Result{Interruptions: map[Kind]int{}}
	var downUntil, trainingSince time.Duration
	for _, e := range arrivals(m, horizon, rng) {
		res.Interruptions[e.kind]++
		var lost Lost
		detect := sys.Detect
		hangs := sys.HangsEverything || e.kind == KindNetwork || e.kind == KindUnknown ||
			(e.kind == KindGPU && rng.Float64() < a.HangShare)
		if hangs && !slices.Contains(sys.Evidence, e.kind) && e.kind != KindPlanned {
			detect = a.HangTimeout
		}
		if e.kind == KindHost && !hangs {
			detect = sys.NodeLost
		}
		lost.Detect = detect
		lost.Recover = sys.Recover + a.Resume
		if e.kind == KindApplication {
			lost.Wasted = time.Duration(sys.ApplicationRestarts) * (sys.Detect + sys.Recover + a.Resume + a.CrashAfter)
			lost.Fix = a.Fix
		}
		if e.at >= downUntil {
			if !(e.kind == KindPlanned && sys.CheckpointOnNotice) {
				if a.CheckpointInterval > 0 {
					lost.Redo = (e.at - trainingSince) % a.CheckpointInterval
				}
			}
			downUntil = e.at + lost.Detect + lost.Recover + lost.Wasted + lost.Fix
		} else {
			// Down already: this one adds only what reaches past the current recovery.
			end := e.at + lost.Detect + lost.Recover + lost.Wasted + lost.Fix
			if end <= downUntil {
				continue
			}
			lost = scale(lost, end-downUntil)
			downUntil = end
		}
		trainingSince = downUntil
		res.Lost = res.Lost.plus(lost)
	}
	// Time past the horizon is not the horizon's.
	if over := downUntil - horizon; over > 0 {
		res.Lost = scale(res.Lost, res.Lost.Total()-over)
	}
	res.Goodput = 1 - float64(res.Lost.Total())/float64(horizon)
	return res
}

// scale shrinks l, part by part in proportion, to total.
func scale(l Lost, total time.Duration) Lost {
	t := l.Total()
	if t <= 0 || total >= t {
		return l
	}
	f := float64(total) / float64(t)
	return l.each(func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) })
}

// Summary is a system's goodput over many replays: the mean and its 95% confidence interval.
type Summary struct {
	Mean, Low, High float64
	// Lost is the mean time lost by part.
	Lost Lost
}

// Replicate replays the mix n times (seeds 1..n) and summarises the goodput.
func Replicate(m Mix, sys System, a Assumptions, n int) Summary {
	var sum, sumSq float64
	var lost Lost
	for i := 1; i <= n; i++ {
		r := Replay(m, m.Horizon, sys, a, uint64(i))
		sum += r.Goodput
		sumSq += r.Goodput * r.Goodput
		lost = lost.plus(r.Lost.each(func(d time.Duration) time.Duration { return d / time.Duration(n) }))
	}
	mean := sum / float64(n)
	half := 0.0
	if n > 1 {
		sd := math.Sqrt(max(0, (sumSq-float64(n)*mean*mean)/float64(n-1)))
		half = 1.96 * sd / math.Sqrt(float64(n))
	}
	return Summary{Mean: mean, Low: mean - half, High: mean + half, Lost: lost}
}
