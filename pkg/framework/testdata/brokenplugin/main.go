// Command brokenplugin is a deliberately broken framework plugin for pkg/framework's
// tests. It is installed as faultline-plugin-<mode>, and its mode says how it misbehaves:
//
//	crash        exits in the middle of every Rendezvous
//	crashonce    exits in the middle of the first Rendezvous (of all its processes)
//	hang         never answers Rendezvous
//	freeze       stops itself (SIGSTOP) in Rendezvous: even go-plugin's shutdown hangs
//	panic        panics in Rendezvous
//	garbageenv   answers Rendezvous with invalid env vars
//	badregex     answers FailureHints with an invalid regular expression
//	wrongname    calls itself by another framework's name
//	apiv99       speaks only plugin API version 99
//	apiv1        speaks only plugin API version 1, as a plugin built before version 2 did,
//	             with a hint that names an infrastructure cause (which version 1 allowed)
//	exitatstart  exits before the handshake
//
// Any other mode is a well-behaved plugin of that name. Each start appends the process
// id to $FAULTLINE_TEST_STATE_DIR/<mode>.starts, when that variable is set.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/go-plugin"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

func main() {
	mode := strings.TrimPrefix(filepath.Base(os.Args[0]), framework.BinaryPrefix)
	state := os.Getenv("FAULTLINE_TEST_STATE_DIR")
	if state != "" {
		f, err := os.OpenFile(filepath.Join(state, mode+".starts"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, os.Getpid())
			_ = f.Close()
		}
	}
	p := broken{mode: mode, state: state}
	switch mode {
	case "exitatstart":
		fmt.Fprintln(os.Stderr, "brokenplugin: exiting before the handshake on purpose")
		os.Exit(1)
	case "apiv99":
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  framework.HandshakeConfig,
			VersionedPlugins: map[int]plugin.PluginSet{99: framework.PluginSets(p)[1]},
			GRPCServer:       plugin.DefaultGRPCServer,
		})
	case "apiv1":
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  framework.HandshakeConfig,
			VersionedPlugins: map[int]plugin.PluginSet{1: framework.PluginSets(p)[1]},
			GRPCServer:       plugin.DefaultGRPCServer,
		})
	default:
		framework.Serve(p)
	}
}

type broken struct {
	mode  string
	state string
}

func (b broken) Info(context.Context) (framework.Info, error) {
	name := b.mode
	if b.mode == "wrongname" {
		name = "someone-else"
	}
	return framework.Info{Name: name, Version: "broken", APIVersion: framework.APIVersion, DefaultRestartScope: v1alpha1.RestartScopeGang}, nil
}

func (b broken) Rendezvous(_ context.Context, run framework.RunSpec) (framework.Rendezvous, error) {
	switch b.mode {
	case "crash":
		crash()
	case "crashonce":
		marker := filepath.Join(b.state, "crashonce.crashed")
		if _, err := os.Stat(marker); err != nil {
			_ = os.WriteFile(marker, nil, 0o644)
			crash()
		}
	case "hang":
		select {}
	case "freeze":
		// The stop takes the other threads a moment; never answer in the meantime.
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		select {}
	case "panic":
		panic("brokenplugin: panicking on purpose")
	case "garbageenv":
		return framework.Rendezvous{Env: []framework.EnvVar{
			{Name: "NOT VALID", Value: "$(NOWHERE)"},
			{Name: v1alpha1.EnvIndex, Value: "7"},
		}}, nil
	}
	// What a plugin prints reaches the host's plugin log (go-plugin streams os.Stderr).
	fmt.Fprintf(os.Stderr, "brokenplugin: rendezvous for run %s\n", run.Name)
	return framework.Rendezvous{Env: []framework.EnvVar{{Name: "BROKEN_PLUGIN_MODE", Value: b.mode}, {Name: "RUN", Value: run.Name}}}, nil
}

func (b broken) FailureHints(context.Context) ([]framework.HintPattern, error) {
	switch b.mode {
	case "badregex":
		return []framework.HintPattern{{Pattern: "(unclosed", Cause: v1alpha1.CausePeerFailure}}, nil
	case "apiv1":
		return []framework.HintPattern{
			{Pattern: "uncorrectable ECC error", Cause: v1alpha1.CauseGPUFault},
			{Pattern: "peer went away", Cause: v1alpha1.CausePeerFailure},
		}, nil
	}
	return []framework.HintPattern{{Pattern: "peer went away", Cause: v1alpha1.CausePeerFailure}}, nil
}

// crash dies as a Go program does: an unrecovered panic on a goroutine of its own, which
// the runtime reports on the process's stderr before it exits with status 2.
func crash() {
	go func() { panic("brokenplugin: crashing on purpose") }()
	select {}
}
