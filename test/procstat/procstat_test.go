package procstat

import (
	"os"
	"runtime"
	"sync"
	"syscall"
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
	// Burn this thread's CPU time, not wall time: on a loaded machine 50 ms of wall time may
	// be far less CPU, and the process has at least what its one thread used.
	runtime.LockOSThread()
	for start := threadCPU(t); threadCPU(t)-start < 50*time.Millisecond; {
	}
	runtime.UnlockOSThread()
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

// TestSchedSeesContention: one more busy thread than CPUs must show as this process's
// threads running and waiting for a CPU, and as CPU pressure on the machine.
func TestSchedSeesContention(t *testing.T) {
	n := runtime.NumCPU() + 1
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	before, err := ReadSched(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	pressure0, pressureErr := CPUPressure()
	// Each thread burns its own CPU time, not wall time, so that the demand is the same on a
	// loaded machine: n × burn on n-1 CPUs cannot run without some thread waiting.
	const burn = 100 * time.Millisecond
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			runtime.LockOSThread() // each its own thread: n runnable threads on n-1 CPUs
			defer runtime.UnlockOSThread()
			for start := threadCPU(t); threadCPU(t)-start < burn; { // the thread may have run before
			}
		})
	}
	wg.Wait()
	after, err := ReadSched(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if ran := after.Run - before.Run; ran < time.Duration(n)*burn {
		t.Errorf("threads ran %v, want ≥ %v (%d threads busy for %v of CPU each)", ran, time.Duration(n)*burn, n, burn)
	}
	if after.Wait <= before.Wait {
		t.Errorf("threads waited %v → %v for a CPU: want more, %d threads were busy on %d CPUs", before.Wait, after.Wait, n, n-1)
	}
	if _, err := ReadSched(1 << 30); err == nil {
		t.Error("scheduling of a process that does not exist: no error")
	}
	if os.IsNotExist(pressureErr) {
		t.Log("no /proc/pressure/cpu on this kernel: CPU pressure not checked")
		return
	}
	if pressureErr != nil {
		t.Fatal(pressureErr)
	}
	if pressure1, err := CPUPressure(); err != nil || pressure1 <= pressure0 {
		t.Errorf("CPU pressure %v → %v (%v): want it to grow while %d threads contend for %d CPUs", pressure0, pressure1, err, n, n-1)
	}
}

// threadCPU is the calling thread's CPU time (getrusage RUSAGE_THREAD).
func threadCPU(t *testing.T) time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD, Linux
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		t.Error(err)
		return time.Hour // stop burning
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
