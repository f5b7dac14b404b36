// Command demo runs faultline's main scenario on a local control plane that it starts and
// stops itself (make demo): a 16-worker JAX run on 8 simulated GPU nodes survives a node
// shutdown (restart) and then fails fast on a bug, narrated step by step, with the
// launcher's own output and the measured times. With -real-nodes (make demo REAL_NODES=1)
// the same story runs on two real nodes (kubelet, containerd, runc) with the test worker,
// and the exit codes and times are the real ones.
//
//	go run ./hack/demo [-timeout 4m] [-bin bin] [-html timeline.html] [-real-nodes]
package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout))
}

// realMain runs the demo with command-line args and returns the exit code.
func realMain(args []string, stdout io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	o := options{}
	fs.DurationVar(&o.Timeout, "timeout", 4*time.Minute, "give up (and clean up) after this long")
	fs.StringVar(&o.Bin, "bin", "bin", "directory with launcher, nodeagent and faultline-plugin-* (make build), relative to the repository root")
	fs.StringVar(&o.HTML, "html", "", "also write the run's timeline as an HTML page to this file")
	fs.IntVar(&o.Nodes, "nodes", 8, "fake GPU nodes (8 GPUs each)")
	fs.IntVar(&o.Workers, "workers", 16, "workers of the JAX run (2 GPUs each; with -real-nodes 4 by default, 1 GPU each)")
	fs.BoolVar(&o.RealNodes, "real-nodes", false, "tell the story on 2 real nodes (kubelet, containerd, runc: needs root, runc and the CNI plugins) with the test worker")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	workersSet := false
	fs.Visit(func(f *flag.Flag) { workersSet = workersSet || f.Name == "workers" })
	if o.RealNodes && !workersSet {
		o.Workers = 4 // both nodes' GPUs, and what this machine's CPUs run briskly
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{opts: o, out: &syncWriter{w: stdout}}
	if err := d.run(ctx); err != nil {
		d.say("")
		d.say("demo failed: %v", err)
		return 1
	}
	d.summary()
	return 0
}

type options struct {
	Timeout        time.Duration
	Bin, HTML      string
	Nodes, Workers int
	RealNodes      bool
}
