// Package framework owns the framework plugin protocol: the Go interface a plugin
// implements (Plugin), the gRPC service it is carried over (proto/framework.proto), the
// go-plugin handshake and version negotiation, the gRPC shims on both sides, the
// validation of everything a plugin says, and the Host through which the controller uses
// plugins. Nothing else in faultline speaks to a plugin directly.
//
// # Writing a plugin
//
// A plugin is a binary named faultline-plugin-<framework> whose main calls Serve with an
// implementation of Plugin:
//
//	func main() { framework.Serve(myplugin.Plugin{}) }
//
// Rendezvous returns the framework's environment for a run. The controller puts the
// common FAULTLINE_* variables first in every container, FAULTLINE_INDEX (the pod's
// completion index) before all others, and appends the plugin's variables after them.
// Index-dependent values are therefore written with Kubernetes dependent environment
// expansion: a value "$(FAULTLINE_INDEX)" (IndexRef) becomes "3" in the pod with index 3.
// Expansion only substitutes; it cannot compute (no arithmetic, no lookup by index), so a
// framework whose per-pod values are not a plain substitution of the index must document
// how the program derives them.
//
// RunSpec.Worker tells a plugin what the run's worker container asks for (extended
// resources such as nvidia.com/gpu: GPUs per worker for PyTorch's nproc_per_node). Info's
// DefaultRestartScope fills a run's unset spec.restartScope, and its DefaultPorts are
// declared when a Rendezvous answer names no ports; Resolved carries both to the
// controller.
//
// FailureHints returns regular expressions over a failed container's termination message
// (with terminationMessagePolicy FallbackToLogsOnError, the tail of its log), each mapped
// to a cause: PeerFailure for "a peer died, not me", or an application cause for "my
// program's own fault". Never an infrastructure cause: anyone can print "uncorrectable ECC
// error", and only the node agent's attested evidence proves a node fault. A hint must
// match only messages that mean what it says: a local error judged a peer failure restarts
// a run that should fail fast. See exitclass.Classify for how hints weigh against other
// evidence; HintMatcher and package hinttest test hints against real messages.
//
// # Versions
//
// HandshakeConfig never changes: its magic cookie only tells a plugin binary that it was
// started by faultline. The API version is negotiated by go-plugin from VersionedPlugins:
// the host offers every version it speaks (MinAPIVersion to APIVersion), the plugin serves
// the newest one both know. Version 2 added RunSpec.Worker and allows only PeerFailure and
// application causes in hints; it is the same gRPC service as version 1, so one binary
// serves both, and Serve reports the negotiated version in Info. A host drops the
// infrastructure hints of a version 1 plugin (with a warning) and refuses a version 2
// plugin that sends one. A change that is not an addition would be a new proto package,
// a new Go interface and a new entry in PluginSets, the host adapting older plugins to it.
//
// docs/plugins.md is the guide for plugin authors; examples/ holds a minimal plugin.
//
// # The host
//
// Host finds faultline-plugin-<framework> in its plugin directory, then in PATH, starts it
// on first use, checks its Info and compiles its FailureHints once per process, and caches
// Rendezvous answers per run spec. Every call has a deadline; a plugin that misses it is
// killed. A plugin that crashed is restarted once; after that, and after any other
// failure, the host answers with a PluginError that names the plugin, its binary, what
// failed and how to fix it, and tries the plugin again only after HostOptions.RetryAfter.
// Panics in the shims are recovered and answers are validated, so a broken plugin costs
// its own framework's runs and nothing else.
package framework
