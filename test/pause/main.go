// Command pause is the sandbox ("pause") container of the test substrate's real nodes, built
// from this repository because no registry is reachable there: it holds the pod's namespaces
// open, reaps the zombies it inherits as the pod's PID 1, and exits 0 on SIGTERM or SIGINT,
// as registry.k8s.io/pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
