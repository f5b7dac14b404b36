package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/faultline-dev/faultline/test/procstat"
)

// work is what the machine's processes did over one restart, beside the API server's writes:
// the controller's reconciles of runs (how many, how long in all, their wait in its queue)
// and its CPU time, and the CPU time of this process, which plays every node's agent and
// kubelet of the restarts in place. What grows with the gang, at one API server's writes, is
// here: two sizes' rows side by side say whose work it is.
type work struct {
	reconcile, queueWait  histogram
	controllerCPU, simCPU time.Duration
}

// workReading is one reading of the counters work is the difference of.
type workReading struct {
	metrics               string
	controllerCPU, simCPU time.Duration
}

// readWork reads the controller's metrics and CPU time and this process's CPU time.
func (b *bench) readWork(ctx context.Context) (workReading, error) {
	metrics, err := b.controllerMetrics(ctx)
	if err != nil {
		return workReading{}, fmt.Errorf("read the controller's metrics: %w", err)
	}
	ctrl, err := procstat.CPUTime(b.ctrl.Process.Pid)
	if err != nil {
		return workReading{}, fmt.Errorf("read the controller's CPU time: %w", err)
	}
	self, err := procstat.CPUTime(os.Getpid())
	if err != nil {
		return workReading{}, fmt.Errorf("read the bench's CPU time: %w", err)
	}
	return workReading{metrics: metrics, controllerCPU: ctrl, simCPU: self}, nil
}

// since is the work between before and w.
func (w workReading) since(before workReading) *work {
	return &work{
		reconcile:     parseHistogram(w.metrics, reconcileTimeMetric, trainingRunController).since(parseHistogram(before.metrics, reconcileTimeMetric, trainingRunController)),
		queueWait:     parseHistogram(w.metrics, queueWaitMetric, trainingRunController).since(parseHistogram(before.metrics, queueWaitMetric, trainingRunController)),
		controllerCPU: w.controllerCPU - before.controllerCPU,
		simCPU:        w.simCPU - before.simCPU,
	}
}

// workTable: faultline's controller and the simulated node side over each restart, round
// by round.
func (r *session) workTable(b *strings.Builder, scenario string) {
	var rows strings.Builder
	for _, n := range r.sizes() {
		for _, sys := range restartTraced {
			for i, s := range r.pick(sys, scenario, n) {
				if s.work == nil {
					continue
				}
				w := s.work
				fmt.Fprintf(&rows, "| %d | %s | %d | %s | %.0f | %.2f s | %s / %s | %s / %s | %.2f s | %.2f s |\n", n, sys, i+1, secs(s.d),
					w.reconcile.count, w.reconcile.sum, w.reconcile.quantile(0.5), w.reconcile.quantile(0.99),
					w.queueWait.quantile(0.5), w.queueWait.quantile(0.99), w.controllerCPU.Seconds(), w.simCPU.Seconds())
			}
		}
	}
	if rows.Len() == 0 {
		return
	}
	b.WriteString("faultline's controller over each restart, from the fault until every worker ran again (its metrics: `" + reconcileTimeMetric + "`, `" + queueWaitMetric +
		"`, the runs' controller), its CPU time, and the CPU time of the bench's own process, which plays every node's agent and kubelet of a restart in place:\n\n" +
		"| workers | system | round | time-to-restart | reconciles | reconciling, in all | reconcile p50 / p99 | queue wait p50 / p99 | controller CPU | node side CPU |\n" +
		"| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	b.WriteString(rows.String())
	b.WriteString("\n")
}
