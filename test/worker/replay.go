package main

import (
	"fmt"
	"io"
	"time"

	"github.com/faultline-dev/faultline/pkg/framework/hinttest/realoutput"
)

// With --replay, the worker is one worker of a real gang that failed on purpose (package
// realoutput: JAX, PyTorch and CUDA programs recorded on an H100 machine): once its whole
// gang has registered, it prints the recorded output of its index with the original timing
// (each line as long after the gang's start as it was printed after the recorded gang's
// first timestamp) and exits with the recorded code at the recorded time. Four JAX workers
// aborted by their coordination service so exit 134 within the same millisecond, the
// failing one among them, and the classifier must tell which one failed from what they
// printed.

// replayer prints a recorded worker's output; its side effects are fields, for the tests.
type replayer struct {
	out   io.Writer
	sleep func(until time.Time)
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// replay prints worker index of the recording rec, start being the moment this gang stands
// for the recorded one's first timestamp, and returns the worker's exit code.
func (r replayer) replay(rec realoutput.Recording, index int, start time.Time) int {
	if index < 0 || index >= len(rec.Workers) {
		fmt.Fprintf(r.out, "worker: --replay %s has workers 0..%d, not index %d\n", rec.Name, len(rec.Workers)-1, index)
		return 2
	}
	w := rec.Workers[index]
	origin := rec.Start()
	at := func(t time.Time) time.Time {
		if t.IsZero() || origin.IsZero() {
			return start
		}
		return start.Add(t.Sub(origin))
	}
	for _, l := range w.Lines {
		r.sleep(at(l.At))
		fmt.Fprintln(r.out, l.Text)
	}
	r.sleep(at(w.ExitedAt))
	return int(w.ExitCode)
}
