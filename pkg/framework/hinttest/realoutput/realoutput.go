// Package realoutput holds the whole output of real framework gangs that failed on purpose
// (testdata/frameworks; its README says where they come from and what each program did),
// with each worker's exit code and the time of each line as far as the output tells. The
// hint and root-cause tests feed them to the hints and the classifier (package hinttest);
// the real-node test worker prints them again with their original timing (test/worker,
// --replay). It imports nothing heavier than the standard library, for that worker.
package realoutput

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

//go:embed testdata/frameworks
var files embed.FS

const dir = "testdata/frameworks"

// exitCodes are the workers' exit codes, by index, as the README records them.
var exitCodes = map[string][]int32{
	"jax-0.11.2-cpu-worker2-raises": {134, 134, 134, 134}, // the coordination service aborts every process
	"jax-0.11.2-cpu-worker2-exits":  {134, 134, 1, 134},
	"torch-2.11-gloo-rank2-raises":  {1, 1, 1, 1}, // torchrun's
	"torch-2.11-gloo-rank0-crashes": {1, 1, 1, 1},
	"torch-2.11-cuda-device-assert": {1},
	"cupy-14-illegal-address":       {1},
}

// RecordedOn is the day the gangs were recorded (torchrun's summaries say it; glog lines
// carry only the month and day).
var RecordedOn = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)

// Recording is the output of every worker of one gang.
type Recording struct {
	Name    string
	Workers []Worker // by index
}

// Worker is one worker's output and exit.
type Worker struct {
	Index    int
	Log      string
	ExitCode int32
	// Lines are the log's lines, each with the time it was printed as far as the output
	// tells: its own timestamp (a glog/absl prefix to the microsecond, the program's DEVCHECK
	// lines to the second), else the time of the line before it; zero before the first.
	Lines []Line
	// ExitedAt is when the worker exited as far as its output tells: its last line's time
	// (the process ends right after it), zero for output without timestamps.
	ExitedAt time.Time
}

// Line is one line of output (without its newline) and when it was printed.
type Line struct {
	At   time.Time
	Text string
}

// Start is when the gang's first timestamped line was printed, zero if none is: the origin
// for replaying the gang with its original timing.
func (f Recording) Start() time.Time {
	var first time.Time
	for _, w := range f.Workers {
		for _, l := range w.Lines {
			if !l.At.IsZero() && (first.IsZero() || l.At.Before(first)) {
				first = l.At
			}
		}
	}
	return first
}

// All are every recorded gang, by name.
func All() ([]Recording, error) {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, err
	}
	var out []Recording
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		f, err := Load(e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// Names are the names of the recorded gangs.
func Names() []string {
	names := make([]string, 0, len(exitCodes))
	for n := range exitCodes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Load reads one recorded gang.
func Load(name string) (Recording, error) {
	exits, ok := exitCodes[name]
	if !ok {
		return Recording{}, fmt.Errorf("no recording %q (have %s)", name, strings.Join(Names(), ", "))
	}
	f := Recording{Name: name}
	for i, code := range exits {
		raw, err := fs.ReadFile(files, path.Join(dir, name, "w"+strconv.Itoa(i)+".log"))
		if err != nil {
			return Recording{}, fmt.Errorf("recording %s: %w", name, err)
		}
		w := Worker{Index: i, Log: string(raw), ExitCode: code, Lines: timedLines(string(raw))}
		if n := len(w.Lines); n > 0 {
			w.ExitedAt = w.Lines[n-1].At
		}
		f.Workers = append(f.Workers, w)
	}
	return f, nil
}

var (
	// glog and absl: "E1127 02:26:50.166867    1790 coordination_service.cc:1489] ..."
	// (torch's elastic agent logs the same way).
	glogTime = regexp.MustCompile(`^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) `)
	// the recording program's own lines: "DEVCHECK [2] 02:26:40 raising on purpose"
	devcheckTime = regexp.MustCompile(`^DEVCHECK \[\d+\] (\d\d):(\d\d):(\d\d) `)
)

func timedLines(log string) []Line {
	text := strings.TrimSuffix(log, "\n")
	if text == "" {
		return nil
	}
	var lines []Line
	var last time.Time
	for _, l := range strings.Split(text, "\n") {
		if t := lineTime(l); !t.IsZero() && t.After(last) {
			last = t // a line to the second after one to the microsecond keeps the later time
		}
		lines = append(lines, Line{At: last, Text: l})
	}
	return lines
}

func lineTime(l string) time.Time {
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	if m := glogTime.FindStringSubmatch(l); m != nil {
		return time.Date(RecordedOn.Year(), time.Month(num(m[1])), num(m[2]), num(m[3]), num(m[4]), num(m[5]), num(m[6])*1000, time.UTC)
	}
	if m := devcheckTime.FindStringSubmatch(l); m != nil {
		return RecordedOn.Add(time.Duration(num(m[1]))*time.Hour + time.Duration(num(m[2]))*time.Minute + time.Duration(num(m[3]))*time.Second)
	}
	return time.Time{}
}
