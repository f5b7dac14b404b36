package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// timeline is a run's history laid out in time: one bar per attempt, from status.attempts,
// and the run's events. The terminal and the HTML renderings draw the same model.
type timeline struct {
	Run, Namespace string
	Phase          v1alpha1.Phase
	Workers        int32
	Attempts       int32
	Restarts       v1alpha1.RestartCounts
	Origin, End    time.Time
	Bars           []bar
	Events         []tlEvent
}

type bar struct {
	Attempt int32
	// Start is when the attempt's Job was created; Running when all its workers first were;
	// End when it ended (the chart's end while it goes on).
	Start, Running, End time.Time
	// runningCoarse: Running has whole seconds only (status times do), Start may be sharper.
	runningCoarse bool
	// Outcome is Restarted, Failed, Succeeded, Suspended, or "" while it goes on.
	Outcome string
	// Note says why it ended.
	Note string
	// Excluded are the nodes it was kept off.
	Excluded []string
	// InPlace says how the attempt restarted in place (inPlaceSummary); "" when its pods
	// were made for it.
	InPlace string
	// Checkpoint says what the attempt's workers saved when a planned move asked them
	// (checkpointLine); "" when none was asked.
	Checkpoint string
}

type tlEvent struct {
	At           time.Duration
	Type, Reason string
	Note         string
}

func buildTimeline(run *v1alpha1.TrainingRun, events []corev1.Event, now time.Time) *timeline {
	st := &run.Status
	t := &timeline{Run: run.Name, Namespace: run.Namespace, Phase: st.Phase, Workers: run.Spec.Workers, Attempts: st.Attempt, Restarts: st.Restarts}
	t.Origin = run.CreationTimestamp.Time
	if st.StartTime != nil && (t.Origin.IsZero() || st.StartTime.Before(&run.CreationTimestamp)) {
		t.Origin = st.StartTime.Time
	}
	t.End = now
	if st.CompletionTime != nil {
		t.End = st.CompletionTime.Time
	}
	for i := range st.Attempts {
		rec := &st.Attempts[i]
		if rec.EndTime != nil && rec.EndTime.After(t.End) {
			t.End = rec.EndTime.Time
		}
	}
	for i := range events {
		e := &events[i]
		at := eventTime(e)
		if at.After(t.End) {
			t.End = at
		}
		if t.Origin.IsZero() || at.Before(t.Origin) {
			t.Origin = at
		}
	}
	for i := range st.Attempts {
		rec := &st.Attempts[i]
		if rec.StartTime == nil {
			continue // never started: a restart waiting for backoff, or a suspend
		}
		b := bar{Attempt: rec.Attempt, Start: rec.StartTime.Time, End: t.End, Outcome: rec.Outcome, Excluded: rec.ExcludedNodes}
		if rec.RestartMode == v1alpha1.RestartModeInPlace {
			b.InPlace = inPlaceSummary(run, rec)
		}
		ck := rec.Checkpoint
		if ck == nil && rec.Attempt == st.Attempt {
			ck = st.Checkpoint // asked, the move waiting
		}
		if ck != nil {
			b.Checkpoint = checkpointLine(run, ck)
		}
		if rec.RunningTime != nil {
			b.Running = rec.RunningTime.Time
			b.runningCoarse = b.Running.Nanosecond() == 0
		}
		if rec.EndTime != nil {
			b.End = rec.EndTime.Time
		}
		switch {
		case rec.Verdict != nil:
			b.Note = verdictLine(rec.Verdict)
		case rec.Outcome == policy.OutcomeSucceeded:
			b.Note = "every worker completed"
		case rec.Outcome == policy.OutcomeSuspended && rec.Suspension != "":
			b.Note = "suspended by " + rec.Suspension + ": no restart counted"
		case rec.Outcome == policy.OutcomeSuspended:
			b.Note = "suspended: no restart counted"
		case rec.Outcome == "":
			b.Note = fmt.Sprintf("in progress, %d/%d workers ready", readyWorkers(run), run.Spec.Workers)
		}
		t.Bars = append(t.Bars, b)
	}
	refine(t.Bars, events, st.Attempt)
	for i := range events {
		e := &events[i]
		t.Events = append(t.Events, tlEvent{At: eventTime(e).Sub(t.Origin), Type: e.Type, Reason: e.Reason, Note: strings.TrimSpace(e.Message)})
	}
	return t
}

// refine sharpens the bars' start and end with the times of the controller's events:
// status times have whole seconds (metav1.Time), event times microseconds, and a restart
// takes a second or two. An event replaces a status time only within the second that the
// status time was truncated to.
func refine(bars []bar, events []corev1.Event, current int32) {
	within := func(status, event time.Time) bool {
		return !event.Before(status) && event.Sub(status) < time.Second
	}
	for i := range events {
		e := &events[i]
		var n int32
		var end bool
		switch e.Action {
		case v1alpha1.ActionCreateAttempt:
			if _, err := fmt.Sscanf(e.Message, "attempt %d:", &n); err != nil {
				continue
			}
		case v1alpha1.ActionRestart:
			if _, err := fmt.Sscanf(e.Message, "attempt %d failed", &n); err != nil {
				continue
			}
			end = true
		case v1alpha1.ActionFail, v1alpha1.ActionSucceed, v1alpha1.ActionSuspend:
			n, end = current, true
		default:
			continue
		}
		at := eventTime(e)
		for j := range bars {
			b := &bars[j]
			if b.Attempt != n {
				continue
			}
			switch {
			case end && b.Outcome != "" && within(b.End, at):
				b.End = at
			case !end && within(b.Start, at):
				b.Start = at
			}
			if !b.Running.IsZero() && b.Running.Before(b.Start) {
				b.Running = b.Start // the same second, truncated
			}
		}
	}
}

// runningAfter is how long an attempt took to have every worker Running; status times have
// whole seconds, so under a second is "<1s".
func runningAfter(b bar) string {
	return sinceStart(b.Start, b.Running, b.runningCoarse)
}

// sinceStart renders how long after start a coarse (whole-second) time t came.
func sinceStart(start, t time.Time, coarse bool) string {
	d := t.Sub(start)
	if coarse && d < time.Second {
		return "<1s"
	}
	return span(d)
}

func (t *timeline) total() time.Duration {
	if d := t.End.Sub(t.Origin); d > 0 {
		return d
	}
	return time.Second
}

// ticks are round offsets from the origin, at most five of them after 0.
func (t *timeline) ticks() []time.Duration {
	steps := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}
	total := t.total()
	step := steps[len(steps)-1]
	for _, s := range steps {
		if total/s <= 5 {
			step = s
			break
		}
	}
	var out []time.Duration
	for d := time.Duration(0); d <= total; d += step {
		out = append(out, d)
	}
	return out
}

// tick renders an offset on the axis: "0s", "500ms", "15s", "2m", "1m30s", "2h".
func tick(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", int(d.Hours()))
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < time.Minute:
		return fmt.Sprintf("%gs", d.Seconds())
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

func offset(d time.Duration) string {
	if d < 0 {
		return "-" + offset(-d)
	}
	if d < time.Minute {
		return fmt.Sprintf("+%.1fs", d.Seconds())
	}
	return "+" + span(d)
}

func (t *timeline) title() string {
	n := int(t.Attempts)
	word := "attempts"
	if n == 1 {
		word = "attempt"
	}
	s := fmt.Sprintf("TrainingRun %s/%s: %s, %d %s in %s, %d workers, restarts: %s",
		t.Namespace, t.Run, orNone(string(t.Phase)), n, word, span(t.End.Sub(t.Origin)), t.Workers, restartsShort(t.Restarts))
	return s
}

// Bar glyphs of the terminal chart.
const (
	glyphStarting  = '░'
	glyphRunning   = '█'
	glyphFailed    = '✗'
	glyphSucceeded = '✓'
	glyphSuspended = '‖'
	glyphOngoing   = '▸'
)

func endGlyph(outcome string) rune {
	switch outcome {
	case policy.OutcomeRestarted, policy.OutcomeFailed:
		return glyphFailed
	case policy.OutcomeSucceeded:
		return glyphSucceeded
	case policy.OutcomeSuspended:
		return glyphSuspended
	}
	return glyphOngoing
}

// TimelineWidth is the width of the terminal chart's time axis, in columns.
const TimelineWidth = 48

// Timeline writes a run's attempts as a Gantt chart for the terminal, then its events.
func Timeline(w io.Writer, run *v1alpha1.TrainingRun, events []corev1.Event, now time.Time) error {
	t := buildTimeline(run, events, now)
	p := &pw{w: w}
	const label = 12 // "attempt 12  "
	width := TimelineWidth
	cell := func(at time.Time) int {
		c := int(float64(at.Sub(t.Origin)) / float64(t.total()) * float64(width))
		return min(max(c, 0), width-1)
	}
	p.line(0, t.title())
	p.line(0, "")
	// The axis: labels above, a ruler below.
	labels := []rune(strings.Repeat(" ", width+8))
	ruler := []rune(strings.Repeat("─", width))
	ruler[0] = '├'
	next := 0
	for _, d := range t.ticks() {
		c := cell(t.Origin.Add(d))
		if d > 0 && c < width {
			ruler[c] = '┼'
		}
		s := []rune(tick(d))
		if c < next || c+len(s) > len(labels) {
			continue
		}
		copy(labels[c:], s)
		next = c + len(s) + 1
	}
	p.line(0, strings.Repeat(" ", label)+strings.TrimRight(string(labels), " "))
	p.line(0, strings.Repeat(" ", label)+string(ruler))
	if len(t.Bars) == 0 {
		p.line(0, strings.Repeat(" ", label)+"(no attempt has started yet)")
	}
	for _, b := range t.Bars {
		row := []rune(strings.Repeat(" ", width))
		c0, c1 := cell(b.Start), cell(b.End)
		c1 = max(c1, c0)
		run := width
		if !b.Running.IsZero() {
			run = cell(b.Running)
		}
		for c := c0; c <= c1; c++ {
			row[c] = glyphStarting
			if c >= run {
				row[c] = glyphRunning
			}
		}
		row[c1] = endGlyph(b.Outcome)
		outcome := b.Outcome
		if outcome == "" {
			outcome = "Running"
		}
		p.line(0, fmt.Sprintf("%-*s%s  %s: %s", label, fmt.Sprintf("attempt %d", b.Attempt), string(row), outcome, b.Note))
	}
	p.line(0, strings.Repeat(" ", label)+fmt.Sprintf("%c starting  %c all workers Running  %c failed  %c succeeded  %c suspended  %c in progress",
		glyphStarting, glyphRunning, glyphFailed, glyphSucceeded, glyphSuspended, glyphOngoing))
	if g := goodputLine(run, now); g != "" {
		p.line(0, "")
		p.line(0, "Goodput: "+g)
	}
	if len(t.Bars) > 0 {
		p.line(0, "")
		p.line(0, fmt.Sprintf("Attempts (times from %s):", stamp(t.Origin)))
	}
	for _, b := range t.Bars {
		s := fmt.Sprintf("attempt %d  %s → %s", b.Attempt, offset(b.Start.Sub(t.Origin)), offset(b.End.Sub(t.Origin)))
		if !b.Running.IsZero() {
			s += "  all workers Running after " + runningAfter(b)
		}
		if len(b.Excluded) > 0 {
			s += "  kept off " + strings.Join(b.Excluded, ", ")
		}
		p.line(1, s)
		if b.InPlace != "" {
			p.line(2, "restarted "+b.InPlace)
		}
		if b.Checkpoint != "" {
			p.line(2, "checkpoint "+b.Checkpoint)
		}
	}
	if len(t.Events) == 0 {
		return p.err
	}
	p.line(0, "")
	p.line(0, "Events:")
	rows := make([][]string, 0, len(t.Events))
	for _, e := range t.Events {
		rows = append(rows, []string{offset(e.At), e.Reason, truncate(e.Note, 110)})
	}
	p.table(1, rows)
	return p.err
}
