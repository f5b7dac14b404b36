package main

import (
	"strings"
	"testing"
	"time"
)

// The fleet replay takes this run's recoveries at its largest gang and the default rate
// limit where it measured them, says so, and keeps the cited defaults for the rest.
func TestFleetTakesTheMeasuredRecoveries(t *testing.T) {
	defaults := fleetConfig{recreate: 110 * time.Second, inPlace: 96 * time.Second, jobSet: 310 * time.Second, floor: 102 * time.Second}
	got, source := measuredRecoveries(defaults, nil)
	if got.recreate != defaults.recreate || got.floor != defaults.floor || source != fleetDefaultsSource {
		t.Errorf("no session: %+v from %q, want the defaults from %q", got, source, fleetDefaultsSource)
	}
	s := &session{qps: 0}
	for _, x := range []sample{
		{system: sysFaultline, scenario: scenarioShutdown, workers: 256, d: 7 * time.Second},
		{system: sysFaultline, scenario: scenarioShutdown, workers: 2048, d: 80 * time.Second},
		{system: sysFaultline, scenario: scenarioShutdown, workers: 2048, d: 90 * time.Second},
		{system: sysFaultline, scenario: scenarioShutdown, workers: 2048, d: 200 * time.Second},
		{system: scenarioFloor, scenario: scenarioFloor, workers: 2048, d: 70 * time.Second},
	} {
		s.add(x)
	}
	other := &session{qps: 200}
	other.add(sample{system: sysJobSetDefault, scenario: scenarioShutdown, workers: 2048, d: time.Second})
	got, source = measuredRecoveries(defaults, []*session{other, s})
	if got.recreate != 90*time.Second || got.floor != 70*time.Second || got.inPlace != defaults.inPlace || got.jobSet != defaults.jobSet {
		t.Errorf("recoveries %+v: want the median at 2,048 workers for faultline and the floor, the defaults for the rest", got)
	}
	if !strings.Contains(source, "this run at 2048 workers") || !strings.Contains(source, sysFaultline) || !strings.Contains(source, fleetDefaultsSource) {
		t.Errorf("source %q: want this run's, naming what it measured, and the defaults' for the rest", source)
	}

	f := defaults
	f.replays, f.hangTimeouts = 3, []time.Duration{10 * time.Minute}
	var b strings.Builder
	fleetMarkdown(&b, f, nil)
	for _, sys := range fleetSystems(f) {
		if !strings.Contains(b.String(), "| "+sys.Name+" |") {
			t.Errorf("the fleet table has no row for %s:\n%s", sys.Name, b.String())
		}
	}
}
