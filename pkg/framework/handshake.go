package framework

import (
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// HandshakeConfig is shared by the host and every plugin. It must never change: the magic
// cookie only lets a plugin binary refuse to run when it was not started by faultline (a
// user experience, not a security, feature), and the protocol version is negotiated
// through VersionedPlugins, not through ProtocolVersion, which stays 1 for go-plugin's
// benefit.
var HandshakeConfig = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "FAULTLINE_PLUGIN",
	MagicCookieValue: "c22e0c690ca7240025c6367f027d9810296992090318cb96ca12e356f12b3b12",
}

// APIVersion is the newest plugin API version this package speaks; it speaks every
// version from MinAPIVersion up, as host and as plugin.
//
// Version 2 adds RunSpec.Worker and allows hints only with PeerFailure or an application
// cause. Version 3 (this SDK) adds Rendezvous.Roles, SuccessPolicy and ReadJobAndPods.
// Every version is the same gRPC service (fields were only added), so one binary serves
// them all: an old host negotiates its newest version with a new plugin, a new host an old
// plugin's, and each side then relies only on what that version has.
const APIVersion = 3

// MinAPIVersion is the oldest plugin API version this package speaks.
const MinAPIVersion = 1

// PluginName is the key of the framework plugin in every plugin set.
const PluginName = "framework"

// BinaryPrefix is how a plugin binary's name starts: faultline-plugin-<framework>.
const BinaryPrefix = "faultline-plugin-"

// PluginSets are the plugin sets of every API version, serving impl. The host uses them
// with a nil impl (it only dispenses clients).
//
// A future version that changes the meaning of a message rather than adding to it would be
// a new service in proto/ (package faultline.framework.v3), a new Go interface and shim,
// and an entry here; the host would adapt older plugins to the new interface.
func PluginSets(impl Plugin) map[int]plugin.PluginSet {
	sets := map[int]plugin.PluginSet{}
	for v := MinAPIVersion; v <= APIVersion; v++ {
		sets[v] = plugin.PluginSet{PluginName: &GRPCPlugin{Impl: impl, Version: v}}
	}
	return sets
}

// VersionedPlugins is what the host offers in the version negotiation.
var VersionedPlugins = PluginSets(nil)

// Serve serves impl as a faultline framework plugin; it returns when the host ends the
// plugin. It is the whole of a plugin's main.
//
// The plugin's log goes to its real stderr as JSON lines, which the host reads and logs
// with their levels; go-plugin hands what the plugin writes to os.Stderr afterwards to the
// host as a stream.
func Serve(impl Plugin) {
	logger := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Info, JSONFormat: true})
	serverLog.Store(&logger)
	go watchParent(os.Getppid, time.Second, func() {
		logger.Error("the host process is gone; exiting")
		os.Exit(1)
	})
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  HandshakeConfig,
		VersionedPlugins: PluginSets(impl),
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger:           logger,
	})
}

// serverLog is the plugin side's logger, set by Serve.
var serverLog atomic.Pointer[hclog.Logger]

// pluginLogger is the logger of the plugin side: Serve's, or stderr outside Serve (tests).
func pluginLogger() hclog.Logger {
	if l := serverLog.Load(); l != nil {
		return *l
	}
	return hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Info})
}

// watchParent calls gone when the process's parent changes: the host died without ending
// the plugin (a SIGKILLed controller), and the plugin was re-parented. go-plugin has no
// such check, and a plugin outside a container would otherwise live on forever.
func watchParent(getppid func() int, every time.Duration, gone func()) {
	parent := getppid()
	for range time.Tick(every) {
		if getppid() != parent {
			gone()
			return
		}
	}
}
