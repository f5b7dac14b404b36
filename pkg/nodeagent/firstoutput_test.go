package nodeagent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// criAt is a CRI log line at t on stream.
func criAt(t time.Time, stream, text string) string {
	return t.UTC().Format(time.RFC3339Nano) + " " + stream + " F " + text + "\n"
}

// The worker's first line of its incarnation: not a line before it began, not a supervising
// barrier's own lines before its attempt's marker, on either stream, nor an earlier
// attempt's output.
func TestFirstLine(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	marker := barrier.AttemptMarker(2)
	for name, tc := range map[string]struct {
		log   string
		since time.Time
		want  time.Time
	}{
		"no line yet":            {log: "", since: ms(0)},
		"before the incarnation": {log: criAt(ms(-5), "stdout", "step 9"), since: ms(0)},
		"its first line":         {log: criAt(ms(-5), "stdout", "old") + criAt(ms(40), "stdout", "step 1") + criAt(ms(50), "stdout", "step 2"), since: ms(0), want: ms(40)},
		"the earlier stream":     {log: criAt(ms(60), "stdout", "a") + criAt(ms(30), "stderr", "warning"), since: ms(0), want: ms(30)},
		"after the marker": {log: criAt(ms(-900), "stdout", barrier.AttemptMarker(1)) + criAt(ms(-800), "stdout", "attempt 1's") +
			criAt(ms(2), "stderr", "time=x level=INFO msg=opened attempt=2") + criAt(ms(3), "stdout", marker) + criAt(ms(4), "stderr", marker) +
			criAt(ms(70), "stdout", "loading"), since: ms(0), want: ms(70)},
		"only the barrier's lines": {log: criAt(ms(2), "stderr", "time=x level=INFO msg=opened attempt=2") + criAt(ms(3), "stdout", marker),
			since: ms(0)},
		"a partial line counts": {log: criAt(ms(-1), "stdout", "x") + strings.Replace(criAt(ms(10), "stdout", "long"), " F ", " P ", 1), since: ms(0), want: ms(10)},
		"garbage is skipped":    {log: "not a log line\n" + criAt(ms(20), "stdout", "ok"), since: ms(0), want: ms(20)},
	} {
		t.Run(name, func(t *testing.T) {
			at, ok, err := FirstLine(strings.NewReader(tc.log), tc.since)
			if err != nil {
				t.Fatal(err)
			}
			if ok != !tc.want.IsZero() || !at.Equal(tc.want) {
				t.Errorf("first line %s (%v), want %s", at, ok, tc.want)
			}
		})
	}
}

func progressingCond(p *corev1.Pod) *corev1.PodCondition {
	return podCond(p, v1alpha1.PodConditionProgressing)
}

// The watch writes a worker's first progress once per incarnation, when it has written a
// line, and only on the pods of runs whose progress is watched.
func TestProgressWatchSaysTheFirstProgressOnce(t *testing.T) {
	dir := t.TempDir()
	started := t0.Add(10 * time.Second)
	quiet := makePod("quiet").worker("60", started).obj()
	off := makePod("off").worker("", started).obj()
	w, client := newTestWriter(t, false, quiet, off)
	watch, clock := newTestWatch(t, w, dir, started, quiet, off)
	check := func(at time.Time) {
		t.Helper()
		clock.SetTime(at)
		if err := watch.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	emptyLog(t, dir, quiet, started)
	logFile(t, dir, off, criAt(started.Add(time.Second), "stdout", "step 1"), started.Add(time.Second))
	check(started.Add(5 * time.Second))
	if n := len(patches(client)); n != 0 {
		t.Fatalf("%d writes before the worker wrote, want none", n)
	}
	first := started.Add(7*time.Second + 250*time.Millisecond)
	logFile(t, dir, quiet, criAt(first, "stdout", "compiling")+criAt(first.Add(time.Second), "stdout", "step 1"), first.Add(time.Second))
	check(started.Add(10 * time.Second))
	check(started.Add(15 * time.Second))
	if n := len(patches(client)); n != 1 {
		t.Fatalf("%d writes, want 1 (the first progress, once)", n)
	}
	c := progressingCond(getPod(t, client, "quiet"))
	if c == nil || c.Status != corev1.ConditionTrue || c.Reason != v1alpha1.ProgressSignalOutput || !c.LastTransitionTime.Time.Equal(first.Truncate(time.Second)) ||
		!strings.Contains(c.Message, formatTime(first)) {
		t.Fatalf("the worker's Progressing condition: %+v", c)
	}
	if c := progressingCond(getPod(t, client, "off")); c != nil {
		t.Errorf("a run whose progress is not watched was written: %+v", c)
	}
}
