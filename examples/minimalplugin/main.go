// Command minimalplugin is the smallest useful faultline framework plugin, for plugin
// authors to copy (docs/plugins.md walks through it). Build it as
// faultline-plugin-example and put it next to the launcher, in the controller's
// --plugin-dir or on its PATH; a TrainingRun with spec.framework: example then gets its
// environment:
//
//	go build -o faultline-plugin-example ./examples/minimalplugin
//
// It imagines a framework whose processes find each other through three variables:
//
//	EXAMPLE_COORDINATOR  <run>-0.<run>.<namespace>.svc:<port>   process 0 coordinates
//	EXAMPLE_RANK         the pod's completion index             $(FAULTLINE_INDEX)
//	EXAMPLE_WORLD        the number of processes                spec.workers
//	EXAMPLE_GPUS         the GPUs each process has              from the pod template
//
// and which prints "lost contact with rank <n>" when another process dies.
package main

import "github.com/faultline-dev/faultline/pkg/framework"

func main() {
	framework.Serve(Plugin{})
}
