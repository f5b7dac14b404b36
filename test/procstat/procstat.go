// Package procstat reads what a Linux process costs (its resident memory, its CPU time) from
// /proc, for the benchmarks and the tests that report it.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Memory is a process's resident set, in bytes: all of it, its anonymous pages (heap and
// stacks), and its file pages (the mapped binary and libraries).
type Memory struct {
	RSS, Anon, File int64
}

// ReadMemory reads pid's resident set from /proc/<pid>/status.
func ReadMemory(pid int) (Memory, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	fields := map[string]*int64{"VmRSS:": &m.RSS, "RssAnon:": &m.Anon, "RssFile:": &m.File}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line) // "VmRSS:   45672 kB"
		if len(f) != 3 || fields[f[0]] == nil {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("pid %d: %s %q: %w", pid, f[0], f[1], err)
		}
		*fields[f[0]] = kb << 10
	}
	if m.RSS == 0 {
		return Memory{}, fmt.Errorf("pid %d: no VmRSS in its status", pid)
	}
	return m, nil
}

// MiB is n bytes in MiB.
func MiB(n int64) float64 { return float64(n) / (1 << 20) }

func (m Memory) String() string {
	return fmt.Sprintf("RSS %.1f MiB (anon %.1f, file %.1f)", MiB(m.RSS), MiB(m.Anon), MiB(m.File))
}

// CPUTime is pid's user and system CPU time from /proc/<pid>/stat, in clock ticks (10 ms:
// USER_HZ is 100 on Linux).
func CPUTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; the fields after it are fixed.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("pid %d: short stat %q", pid, raw)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("pid %d: stat times %q %q", pid, fields[11], fields[12])
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// SelfCPUTime is this process's user and system CPU time, to the microsecond (getrusage):
// finer than CPUTime's ticks, for short windows.
func SelfCPUTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Sched is how a process's threads spent their time with the scheduler: Run on a CPU, and
// Wait runnable in a run queue for a CPU that something else held (what CPU contention costs
// it, which CPU time does not show).
type Sched struct {
	Run, Wait time.Duration
}

// ReadSched adds up /proc/<pid>/task/*/schedstat (nanoseconds run, nanoseconds waited, time
// slices) over pid's live threads. A thread that has exited takes its share with it, which a
// Go process, whose threads live as long as it does, seldom has.
func ReadSched(pid int) (Sched, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return Sched{}, err
	}
	var s Sched
	for _, t := range tasks {
		raw, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if os.IsNotExist(err) {
			continue // the thread exited while we read
		}
		if err != nil {
			return Sched{}, err
		}
		f := strings.Fields(string(raw))
		if len(f) != 3 {
			return Sched{}, fmt.Errorf("pid %d task %s: schedstat %q (a kernel without CONFIG_SCHEDSTATS?)", pid, t.Name(), raw)
		}
		run, err1 := strconv.ParseInt(f[0], 10, 64)
		wait, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return Sched{}, fmt.Errorf("pid %d task %s: schedstat %q", pid, t.Name(), raw)
		}
		s.Run += time.Duration(run)
		s.Wait += time.Duration(wait)
	}
	return s, nil
}

// CPUPressure is the machine's total time, since boot, in which at least one runnable task
// waited for a CPU (the "some" line of /proc/pressure/cpu, PSI).
func CPUPressure() (time.Duration, error) {
	raw, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("/proc/pressure/cpu: total %q", v)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
	}
	return 0, fmt.Errorf("/proc/pressure/cpu: no some total in %q", raw)
}
