package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/faultline-dev/faultline/pkg/fleet"
)

// scenarioFleetFlag replays a published failure mix at its scale (pkg/fleet) with each
// system's measured recovery: no control plane of its own.
const scenarioFleetFlag = "fleet"

// fleetDefaultsSource is where the recoveries come from when this run measured none: the
// quiet rerun of 2026-11-26 at 2,048 workers and the default rate limit (docs/benchmarks.md).
const fleetDefaultsSource = "bench/results/2026-11-26-s16-in-place-default.md and -s16-in-place.md (2,048 workers, the default rate limit)"

// fleetConfig is the fleet scenario's flags: the model's assumptions and each system's
// recovery where this run measured none.
type fleetConfig struct {
	replays     int
	assumptions fleet.Assumptions
	// hangTimeouts: the goodput is reported for each (PyTorch's NCCL watchdog default, and a
	// common 30 minutes).
	hangTimeouts []time.Duration
	// recreate, inPlace, jobSet and floor are the recoveries at 2,048 workers; nodeLost
	// faultline's decision after a host dies, podEviction a Job's (the node monitor's grace
	// and the taint manager's toleration).
	recreate, inPlace, jobSet, floor time.Duration
	nodeLost, podEviction            time.Duration
	jobSetRestarts, jobRestarts      int
}

// fleetSystems are the systems the replay compares, with the recoveries they take.
func fleetSystems(f fleetConfig) []fleet.System {
	faultline := fleet.System{Name: "faultline (recreate)", Detect: time.Second, NodeLost: f.nodeLost, Recover: f.recreate,
		Evidence: []fleet.Kind{fleet.KindGPU}}
	inPlace := faultline
	inPlace.Name, inPlace.Recover = "faultline (in place)", f.inPlace
	notice := inPlace
	notice.Name, notice.CheckpointOnNotice = "faultline (in place, checkpoint on notice)", true
	return []fleet.System{faultline, inPlace, notice,
		{Name: "JobSet (maxRestarts " + fmt.Sprint(f.jobSetRestarts) + ")", Detect: time.Second, NodeLost: f.nodeLost + f.podEviction, Recover: f.jobSet,
			ApplicationRestarts: f.jobSetRestarts},
		{Name: "Indexed Job (backoffLimitPerIndex " + fmt.Sprint(f.jobRestarts) + ")", Detect: time.Second, NodeLost: f.nodeLost + f.podEviction, Recover: f.floor,
			ApplicationRestarts: f.jobRestarts, HangsEverything: true},
	}
}

// measuredRecoveries replaces the defaults with what this run measured at its largest gang,
// the default rate limit, for the node shutdown: the median of each system. It says which.
func measuredRecoveries(f fleetConfig, sessions []*session) (fleetConfig, string) {
	for _, s := range sessions {
		if s.qps != 0 || len(s.sizes()) == 0 {
			continue
		}
		n := slices.Max(s.sizes())
		var used []string
		for _, m := range []struct {
			system, scenario string
			dst              *time.Duration
		}{
			{sysFaultline, scenarioShutdown, &f.recreate},
			{sysFaultlineInPlace, scenarioShutdown, &f.inPlace},
			{sysJobSetDefault, scenarioShutdown, &f.jobSet},
			{scenarioFloor, scenarioFloor, &f.floor},
		} {
			if ss := s.pick(m.system, m.scenario, n); len(ss) > 0 {
				*m.dst = median(ss, func(x sample) time.Duration { return x.d })
				used = append(used, m.system)
			}
		}
		if len(used) > 0 {
			return f, fmt.Sprintf("this run at %d workers (%s; the others: %s)", n, strings.Join(used, ", "), fleetDefaultsSource)
		}
	}
	return f, fleetDefaultsSource
}

// fleetMarkdown replays the mix for every system and hang timeout and writes the table.
func fleetMarkdown(b *strings.Builder, f fleetConfig, sessions []*session) {
	f, source := measuredRecoveries(f, sessions)
	m := fleet.Llama3
	fmt.Fprintf(b, "## The fleet: %s at %s GPUs\n\n", m.Name, thousands(m.GPUs))
	fmt.Fprintf(b, "%s: %s, %d interruptions over %s (%s); %s workers of %d GPUs. Each system's recovery is "+
		"what the bench measured on this machine's control plane from %s, unscaled: 2,048 workers is the run's 2,048 hosts, "+
		"and a real control plane is faster than two cores (the recoveries are an upper bound). %d replays with seeds 1-%d; "+
		"the goodput's mean and 95%% confidence interval (docs/goodput.md says what the model leaves out).\n\n",
		m.Source, m.Name, m.Total(), span(m.Horizon), m.Reported, thousands(m.Workers), m.GPUs/m.Workers, source, f.replays, f.replays)
	a := f.assumptions
	fmt.Fprintf(b, "Assumptions: checkpoint every %s; resume %s after every restart; a GPU fault hangs its worker in %.0f%% of cases; "+
		"a program that fails on its own fails again %s into a restart; the operator's fix of it %s; after a host dies, faultline decides in %s, a Job's pods fail %s later (taint eviction).\n\n",
		span(a.CheckpointInterval), span(a.Resume), a.HangShare*100, span(a.CrashAfter), span(a.Fix), span(f.nodeLost), span(f.podEviction))
	b.WriteString("| system | recovery |")
	for _, h := range f.hangTimeouts {
		fmt.Fprintf(b, " goodput, hang timeout %s |", span(h))
	}
	b.WriteString(" lost: detection | restarts and resumes | work redone | restarts in vain | fixes |\n|---|---:|")
	for range f.hangTimeouts {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---:|---:|---:|---:|\n")
	for _, sys := range fleetSystems(f) {
		fmt.Fprintf(b, "| %s | %s |", sys.Name, secs(sys.Recover))
		var first fleet.Summary
		for i, h := range f.hangTimeouts {
			a := f.assumptions
			a.HangTimeout = h
			s := fleet.Replicate(m, sys, a, f.replays)
			if i == 0 {
				first = s
			}
			fmt.Fprintf(b, " %.2f%% [%.2f, %.2f] |", 100*s.Mean, 100*s.Low, 100*s.High)
		}
		l := first.Lost
		fmt.Fprintf(b, " %s | %s | %s | %s | %s |\n", hours(l.Detect), hours(l.Recover), hours(l.Redo), hours(l.Wasted), hours(l.Fix))
	}
	fmt.Fprintf(b, "\nThe time lost is the mean over the replays with the first hang timeout. The paper: %s.\n\n", m.Reported)
}

func hours(d time.Duration) string { return fmt.Sprintf("%.1f h", d.Hours()) }

// span writes a duration as people say it: 54 days, 30 min, 40 s.
func span(d time.Duration) string {
	switch {
	case d >= 48*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return fmt.Sprintf("%g s", d.Seconds())
}

// thousands writes n with a comma between thousands: 16,384.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
