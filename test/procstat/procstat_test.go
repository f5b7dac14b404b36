package procstat

import (
	"os"
	"testing"
	"time"
)

// TestReadsThisProcess: the readers agree with what this process must have, and a process
// that does not exist is an error, not zeros.
func TestReadsThisProcess(t *testing.T) {
	ballast := make([]byte, 32<<20)
	for i := range ballast {
		ballast[i] = 1 // resident only once touched
	}
	m, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.Anon < int64(len(ballast)) || m.RSS < m.Anon+m.File || m.File <= 0 {
		t.Errorf("memory %+v: want anon ≥ the 32 MiB touched, file > 0, RSS ≥ anon + file", m)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) { // burn CPU
	}
	if fine, err := SelfCPUTime(); err != nil || fine < 50*time.Millisecond {
		t.Errorf("self CPU time %v (%v), want ≥ 50 ms", fine, err)
	}
	if ticks, err := CPUTime(os.Getpid()); err != nil || ticks < 40*time.Millisecond {
		t.Errorf("CPU time %v (%v), want ≥ 40 ms (ticks of 10 ms)", ticks, err)
	}
	_ = ballast[len(ballast)-1]
	if _, err := ReadMemory(1 << 30); err == nil {
		t.Error("memory of a process that does not exist: no error")
	}
	if _, err := CPUTime(1 << 30); err == nil {
		t.Error("CPU time of a process that does not exist: no error")
	}
}
