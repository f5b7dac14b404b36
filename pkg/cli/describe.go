package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/checkpoint"
	"github.com/faultline-dev/faultline/pkg/goodput"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// Describe writes everything a person wants to know about one run: what was asked for, the
// attempts with their verdicts and evidence, the excluded nodes, the conditions and events.
func Describe(w io.Writer, run *v1alpha1.TrainingRun, events []corev1.Event, now time.Time) error {
	p := &pw{w: w}
	p.kv(0, "Name", run.Name)
	p.kv(0, "Namespace", run.Namespace)
	p.kv(0, "Created", stampAgo(&run.CreationTimestamp, now))
	p.kv(0, "Labels", labelsLine(run.Labels))
	describeSpec(p, run)
	describeStatus(p, run, now)
	describeQueue(p, run, now)
	describeAttempts(p, run, now)
	describeConditions(p, run, now)
	describeEvents(p, events, now)
	return p.err
}

func describeSpec(p *pw, run *v1alpha1.TrainingRun) {
	s := &run.Spec
	p.line(0, "Spec:")
	fw := orNone(s.Framework)
	if len(s.FrameworkOptions) > 0 {
		fw += " (options: " + labelsLine(s.FrameworkOptions) + ")"
	}
	p.kv(1, "Framework", fw)
	scope := s.RestartScope
	if scope == "" {
		scope = v1alpha1.RestartScopeGang
	}
	success := s.SuccessPolicy
	if success == "" {
		success = v1alpha1.SuccessPolicyAllWorkers
	}
	p.kv(1, "Workers", fmt.Sprintf("%d (restart scope %s, success policy %s)", s.Workers, scope, success))
	if s.Spares > 0 {
		p.kv(1, "Spares", fmt.Sprintf("%d warm, waiting at their barrier without an index: a lost node's indexes go to them at the next attempt", s.Spares))
	}
	if scope == v1alpha1.RestartScopeIndex {
		p.kv(1, "Per-index limits", fmt.Sprintf("backoffLimitPerIndex %d, maxFailedIndexes %s",
			ptr.Deref(s.BackoffLimitPerIndex, 0), ptrOrNone(s.MaxFailedIndexes)))
	}
	for i := range s.Template.Spec.Containers {
		c := &s.Template.Spec.Containers[i]
		prefix := ""
		if len(s.Template.Spec.Containers) > 1 {
			prefix = c.Name + " "
		}
		p.kv(1, prefix+"Image", orNone(c.Image))
		if cmd := append(append([]string{}, c.Command...), c.Args...); len(cmd) > 0 {
			p.kv(1, prefix+"Command", strings.Join(cmd, " "))
		}
		p.kv(1, prefix+"Resources", resourcesLine(c))
	}
	if g := gpusPerWorker(&s.Template.Spec); g > 0 {
		p.kv(1, "GPUs", fmt.Sprintf("%d per worker, %d in all", g, g*int64(s.Workers)))
	}
	p.kv(1, "Suspend", fmt.Sprint(ptr.Deref(s.Suspend, false)))
	if s.TTLSecondsAfterFinished != nil {
		p.kv(1, "TTL after finished", span(time.Duration(*s.TTLSecondsAfterFinished)*time.Second))
	}
	fp := &s.FailurePolicy
	p.line(0, "Failure policy:")
	p.kv(1, "Max restarts", fmt.Sprintf("infrastructure %d, application %d, unknown %d",
		policy.Budget(fp.MaxRestarts, v1alpha1.ClassInfrastructure), policy.Budget(fp.MaxRestarts, v1alpha1.ClassApplication),
		policy.Budget(fp.MaxRestarts, v1alpha1.ClassUnknown)))
	b := fp.Backoff
	p.kv(1, "Backoff", fmt.Sprintf("none for a rare fault; %ds after a restarted attempt that lived < %ds, doubling up to %ds",
		b.InitialSeconds, b.ResetAfterSeconds, b.MaxSeconds))
	p.kv(1, "Settle", fmt.Sprintf("%ds (wait for node evidence before blaming the application)", settleSeconds(run)))
	var rules []string
	for i, r := range fp.Rules {
		rules = append(rules, fmt.Sprintf("%d. %s", i+1, ruleLine(r)))
	}
	rules = append(rules, "then the defaults: Infrastructure → RestartRun (GPUFault excluding the node), Unknown → RestartRun, Application → FailRun")
	p.kv(1, "Rules", rules[0])
	for _, r := range rules[1:] {
		p.kv(1, "", r)
	}
}

func describeStatus(p *pw, run *v1alpha1.TrainingRun, now time.Time) {
	st := &run.Status
	p.line(0, "Status:")
	p.kv(1, "Phase", orNone(string(st.Phase)))
	p.kv(1, "Attempt", fmt.Sprint(st.Attempt))
	p.kv(1, "Ready workers", fmt.Sprintf("%d/%d", readyWorkers(run), run.Spec.Workers))
	p.kv(1, "Restarts", budgets(run)+" (spent/allowed)")
	if line := goodputLine(run, now); line != "" {
		p.kv(1, "Goodput", line)
	}
	if c := st.Checkpoint; c != nil && c.EndedAt == nil {
		p.kv(1, "Checkpoint", checkpointLine(run, c))
	}
	p.kv(1, "Started", stampAgo(st.StartTime, now))
	if st.CompletionTime != nil {
		p.kv(1, "Completed", stampAgo(st.CompletionTime, now))
	}
	if st.NextAttemptAt != nil && st.Phase == v1alpha1.PhaseRestarting {
		p.kv(1, "Next attempt at", stamp(st.NextAttemptAt.Time))
	}
	ex := none
	if len(st.ExcludedNodes) > 0 {
		ex = strings.Join(st.ExcludedNodes, ", ")
	}
	p.kv(1, "Excluded nodes", ex)
}

func describeAttempts(p *pw, run *v1alpha1.TrainingRun, now time.Time) {
	p.line(0, "Attempts:")
	if len(run.Status.Attempts) == 0 {
		p.line(1, none)
		return
	}
	for i := range run.Status.Attempts {
		rec := &run.Status.Attempts[i]
		p.line(1, fmt.Sprintf("Attempt %d: %s", rec.Attempt, attemptSummary(run, rec, now)))
		if len(rec.ExcludedNodes) > 0 {
			p.kv(2, "Kept off", strings.Join(rec.ExcludedNodes, ", "))
		}
		if rec.RestartMode == v1alpha1.RestartModeInPlace {
			p.kv(2, "Restarted", inPlaceSummary(run, rec))
		}
		if rec.Suspension != "" {
			p.kv(2, "Suspended by", rec.Suspension)
		}
		if rec.Checkpoint != nil {
			p.kv(2, "Checkpoint", checkpointLine(run, rec.Checkpoint))
		}
		v := rec.Verdict
		if v == nil {
			continue
		}
		p.kv(2, "Verdict", verdictLine(v))
		p.kv(2, "Decision", decisionLine(v))
		if v.FailedAt != nil {
			times := "failed " + stamp(v.FailedAt.Time)
			if v.DecidedAt != nil {
				times += ", decided " + stamp(v.DecidedAt.Time)
			}
			p.kv(2, "When", times)
		}
		switch {
		case v.PeerFailures == 1:
			p.kv(2, "Peers", "1 other worker failed after it")
		case v.PeerFailures > 1:
			p.kv(2, "Peers", fmt.Sprintf("%d other workers failed after it", v.PeerFailures))
		}
		if v.Explanation != "" {
			p.kv(2, "Explanation", "")
			for _, l := range wrap(v.Explanation, 96) {
				p.line(3, l)
			}
		}
		if len(v.Evidence) > 0 {
			p.kv(2, "Evidence", "")
			for _, e := range v.Evidence {
				p.line(3, "- "+e)
			}
		}
	}
}

// attemptSummary is "Restarted after 12s (all workers Running 2s after creation)".
// inPlaceSummary says how an attempt restarted in place: where its workers restarted, which
// indexes moved, and when its barrier opened.
func inPlaceSummary(run *v1alpha1.TrainingRun, rec *v1alpha1.AttemptRecord) string {
	s := fmt.Sprintf("in place, in attempt %d's Job: %d workers where they stood", rec.JobAttempt, int(run.Spec.Workers)-len(rec.MovedIndexes))
	if len(rec.MovedIndexes) > 0 {
		moved := make([]string, len(rec.MovedIndexes))
		for i, m := range rec.MovedIndexes {
			moved[i] = strconv.Itoa(int(m))
		}
		s += ", indexes " + strings.Join(moved, ",") + " on new pods"
	}
	if rec.BarrierOpenedAt != nil {
		s += "; barrier opened " + stamp(rec.BarrierOpenedAt.Time)
	} else {
		s += "; waiting for every old worker to stop"
	}
	return s
}

func attemptSummary(run *v1alpha1.TrainingRun, rec *v1alpha1.AttemptRecord, now time.Time) string {
	var s string
	current := rec.Attempt == run.Status.Attempt
	switch {
	case rec.Outcome != "" && rec.StartTime != nil && rec.EndTime != nil:
		s = fmt.Sprintf("%s after %s", rec.Outcome, span(rec.EndTime.Sub(rec.StartTime.Time)))
	case rec.Outcome != "":
		s = rec.Outcome
	case current && rec.StartTime == nil && run.Status.Phase == v1alpha1.PhaseRestarting:
		s = "waiting for the previous attempt's pods to go"
		if n := run.Status.NextAttemptAt; n != nil && n.After(now) {
			s += fmt.Sprintf(" (backoff until %s)", stamp(n.Time))
		}
	case current && rec.StartTime != nil:
		s = fmt.Sprintf("in progress for %s", span(now.Sub(rec.StartTime.Time)))
	default:
		s = "not started"
	}
	if rec.StartTime != nil {
		s += ", created " + stamp(rec.StartTime.Time)
		if rec.RunningTime != nil {
			s += ", all workers Running after " + sinceStart(rec.StartTime.Time, rec.RunningTime.Time, rec.RunningTime.Nanosecond() == 0)
		}
		if rec.ProgressingTime != nil {
			s += ", first progress after " + sinceStart(rec.StartTime.Time, rec.ProgressingTime.Time, true)
		}
	}
	if sv := rec.Saved; sv != nil {
		step := "its last save"
		if sv.Step != nil {
			step = fmt.Sprintf("step %d", *sv.Step)
		}
		s += fmt.Sprintf("; last saved %s at %s", step, stamp(sv.At.Time))
		if rec.Redone != nil {
			s += fmt.Sprintf(", %s of it redone", span(rec.Redone.Duration))
		}
	}
	return s
}

func describeConditions(p *pw, run *v1alpha1.TrainingRun, now time.Time) {
	p.line(0, "Conditions:")
	if len(run.Status.Conditions) == 0 {
		p.line(1, none)
		return
	}
	conds := append(run.Status.Conditions[:0:0], run.Status.Conditions...)
	sort.SliceStable(conds, func(i, j int) bool { return conds[i].Type < conds[j].Type })
	rows := [][]string{{"Type", "Status", "Reason", "Age", "Message"}, {"----", "------", "------", "---", "-------"}}
	for _, c := range conds {
		rows = append(rows, []string{c.Type, string(c.Status), c.Reason, age(c.LastTransitionTime, now), truncate(c.Message, 120)})
	}
	p.table(1, rows)
}

func describeEvents(p *pw, events []corev1.Event, now time.Time) {
	if len(events) == 0 {
		p.line(0, "Events:  "+none)
		return
	}
	p.line(0, "Events:")
	rows := [][]string{{"Type", "Reason", "Age", "From", "Message"}, {"----", "------", "---", "----", "-------"}}
	for i := range events {
		e := &events[i]
		a := shortAge(now.Sub(eventTime(e)))
		if n := eventCount(e); n > 1 {
			a += fmt.Sprintf(" (x%d)", n)
		}
		rows = append(rows, []string{orNone(e.Type), e.Reason, a, eventSource(e), strings.TrimSpace(e.Message)})
	}
	p.table(1, rows)
}

func eventCount(e *corev1.Event) int32 {
	if e.Series != nil {
		return e.Series.Count
	}
	return e.Count
}

// shortAge is kubectl's short age of a duration ("5m", "2d3h").
func shortAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return duration.HumanDuration(d)
}

func ptrOrNone(p *int32) string {
	if p == nil {
		return none
	}
	return fmt.Sprint(*p)
}

func labelsLine(m map[string]string) string {
	if len(m) == 0 {
		return none
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// wrap breaks text into lines of at most width runes, at spaces outside `code spans`
// (a command is never split).
func wrap(text string, width int) []string {
	var lines []string
	var cur strings.Builder
	for _, word := range codeWords(text) {
		if cur.Len() > 0 && len([]rune(cur.String()))+1+len([]rune(word)) > width {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(word)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

// codeWords splits text at white space outside `code spans`.
func codeWords(text string) []string {
	var (
		words  []string
		cur    strings.Builder
		inCode bool
	)
	for _, r := range text {
		switch {
		case r == '`':
			inCode = !inCode
			cur.WriteRune(r)
		case unicode.IsSpace(r) && !inCode:
			if cur.Len() > 0 {
				words = append(words, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		words = append(words, cur.String())
	}
	return words
}

// pw writes describe's indented key/value layout and keeps the first error.
type pw struct {
	w   io.Writer
	err error
}

const keyWidth = 20

func (p *pw) line(indent int, s string) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, "%s%s\n", strings.Repeat("  ", indent), s)
}

// kv writes "Key:   value" with values aligned per indent level.
func (p *pw) kv(indent int, key, value string) {
	label := ""
	if key != "" {
		label = key + ":"
	}
	pad := max(keyWidth-2*indent, len(label)+1)
	p.line(indent, strings.TrimRight(fmt.Sprintf("%-*s%s", pad, label, value), " "))
}

func (p *pw) table(indent int, rows [][]string) {
	if p.err != nil {
		return
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		p.line(indent, strings.TrimRight(l, " "))
	}
}

// checkpointLine is a request to save (spec.checkpoint) as describe says it: when it asked
// and why, what the workers answered, and how it ended (or until when it waits).
func checkpointLine(run *v1alpha1.TrainingRun, c *v1alpha1.CheckpointStatus) string {
	s := fmt.Sprintf("asked %s (%s): %s", stamp(c.RequestedAt.Time), c.Notice, checkpoint.Summary(c, run.Spec.Workers))
	if c.EndedAt == nil {
		return s + "; the move waits until " + stamp(c.Deadline.Time)
	}
	return s + fmt.Sprintf("; the move went on %s after", c.EndedAt.Sub(c.RequestedAt.Time).Round(time.Millisecond))
}

// goodputLine is the run's goodput ledger as of now (pkg/goodput): the training's share of
// the wall time, and where the rest went; "" for a run whose controller keeps none yet.
func goodputLine(run *v1alpha1.TrainingRun, now time.Time) string {
	if run.Status.Goodput == nil {
		return ""
	}
	l := goodput.AsOf(run, now)
	var lost []string
	for _, part := range goodput.Parts(l)[1:] {
		if part.Duration > 0 {
			lost = append(lost, part.Name+" "+span(part.Duration))
		}
	}
	if len(lost) == 0 {
		lost = []string{"nothing"}
	}
	return fmt.Sprintf("%s of %s trained (%s); lost: %s", goodputShare(l, run), span(goodput.Wall(l, run.CreationTimestamp.Time)),
		span(l.Training.Duration), strings.Join(lost, ", "))
}

// goodputShare is the ledger's goodput as a percentage, <none> before any time.
func goodputShare(l *v1alpha1.GoodputLedger, run *v1alpha1.TrainingRun) string {
	if goodput.Wall(l, run.CreationTimestamp.Time) <= 0 {
		return none
	}
	return fmt.Sprintf("%.1f%%", 100*goodput.Share(l, run.CreationTimestamp.Time))
}
