package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// Names the plugin defines: its framework, its one option and its variables.
const (
	Name = "example"

	OptionPort = "port"

	EnvCoordinator = "EXAMPLE_COORDINATOR"
	EnvRank        = "EXAMPLE_RANK"
	EnvWorld       = "EXAMPLE_WORLD"
	EnvGPUs        = "EXAMPLE_GPUS"

	DefaultPort = 7777
)

// Plugin implements framework.Plugin. Its methods must be quick (the host gives each call
// 5 s) and depend only on what they are given: the host caches Rendezvous per run spec.
type Plugin struct{}

var _ framework.Plugin = Plugin{}

// Info names the framework and its defaults: a run that sets no spec.restartScope gets
// Gang, and the coordinator's port is declared on the workers unless Rendezvous says
// otherwise.
func (Plugin) Info(context.Context) (framework.Info, error) {
	return framework.Info{
		Name:                Name,
		Version:             "v0.1.0",
		DefaultRestartScope: v1alpha1.RestartScopeGang,
		DefaultPorts:        []framework.Port{{Name: "example-coord", Port: DefaultPort}},
	}, nil
}

// Rendezvous returns the variables of the run's pods. A problem with the user's
// frameworkOptions is an InvalidOptions error, which the controller shows on the run.
func (Plugin) Rendezvous(_ context.Context, run framework.RunSpec) (framework.Rendezvous, error) {
	port := DefaultPort
	for k, v := range run.Options {
		if k != OptionPort {
			return framework.Rendezvous{}, framework.InvalidOptions("frameworkOptions.%s is not an example option (known: %s)", k, OptionPort)
		}
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			return framework.Rendezvous{}, framework.InvalidOptions("frameworkOptions.port %q is not a port number (1-65535)", v)
		}
		port = p
	}
	gpus := "unknown" // a controller of plugin API version 1 does not say
	if run.Worker != nil {
		gpus = strconv.FormatInt(run.Worker.Devices["nvidia.com/gpu"], 10)
	}
	r := framework.Rendezvous{Env: []framework.EnvVar{
		// Every pod has a stable name; process 0's is the coordinator's.
		{Name: EnvCoordinator, Value: fmt.Sprintf("%s:%d", run.Address(0), port)},
		// Per-pod values are written with Kubernetes' $(VAR) expansion of the pod's index.
		{Name: EnvRank, Value: framework.IndexRef},
		{Name: EnvWorld, Value: strconv.Itoa(int(run.Workers))},
		{Name: EnvGPUs, Value: gpus},
	}}
	if port != DefaultPort { // otherwise Info's DefaultPorts are declared
		r.Ports = []framework.Port{{Name: "example-coord", Port: int32(port)}}
	}
	return r, nil
}

// FailureHints tell "another process died" (PeerFailure) and "my program's own fault" (an
// application cause) apart in a failed container's log tail. A hint must never match a
// local error: a bug judged a peer failure would be retried instead of failing fast.
func (Plugin) FailureHints(context.Context) ([]framework.HintPattern, error) {
	return []framework.HintPattern{
		{Pattern: `lost contact with rank \d+`, Cause: v1alpha1.CausePeerFailure, Description: "another process of the gang died"},
	}, nil
}
