package tfplugin

import (
	"encoding/json"
	"fmt"

	"github.com/faultline-dev/faultline/pkg/framework"
)

// TF_CONFIG's schema (tf.distribute.cluster_resolver.TFConfigClusterResolver):
//
//	{"cluster":   {"<task type>": ["host:port", ...], ...},
//	 "task":      {"type": "<task type>", "index": <int>},
//	 "rpc_layer": "grpc"}
//
// Task types are "chief", "worker", "ps" and "evaluator"; the index is a task's position
// in its type's list; "rpc_layer" is the protocol (TFConfigClusterResolver.rpc_layer).

// multiWorkerConfig is TF_CONFIG for MultiWorkerMirroredStrategy: every pod a worker,
// whose index is the pod's completion index.
func multiWorkerConfig(run framework.RunSpec, port int32) (string, error) {
	workers := make([]string, run.Workers)
	for i := range workers {
		workers[i] = address(run, i, port)
	}
	// The task is spliced in as text: "$(FAULTLINE_INDEX)" must stay a bare token for
	// the kubelet to replace with a JSON number.
	cfg := cluster(map[string][]string{"worker": workers}, `{"type":"worker","index":`+framework.IndexRef+`}`, "")
	return cfg, checkSize(run, cfg)
}

// parameterServerConfig is TF_CONFIG for ParameterServerStrategy: every role but the
// evaluator in "cluster" (the evaluator is no part of the training cluster), the task the
// pod's own, from its role labels, and gRPC as the servers' protocol.
func parameterServerConfig(run framework.RunSpec, roles []framework.Role, port int32) (string, error) {
	jobs := map[string][]string{}
	first := 0
	for _, r := range roles {
		if r.Name != TaskEvaluator {
			for i := first; i < first+int(r.Replicas); i++ {
				jobs[r.Name] = append(jobs[r.Name], address(run, i, port))
			}
		}
		first += int(r.Replicas)
	}
	// "$(FAULTLINE_ROLE)" sits inside a JSON string and "$(FAULTLINE_ROLE_INDEX)" stays a
	// bare token: the kubelet replaces them with a role name (a DNS label, nothing to
	// escape) and a JSON number.
	task := `{"type":"` + framework.RoleRef + `","index":` + framework.RoleIndexRef + `}`
	cfg := cluster(jobs, task, rpcLayerGRPC)
	return cfg, checkSize(run, cfg)
}

// rpcLayerGRPC is TF_CONFIG's "rpc_layer" for servers that speak gRPC, tf.distribute.Server's
// protocol.
const rpcLayerGRPC = "grpc"

// cluster renders TF_CONFIG; task is raw JSON, or empty for none; rpcLayer is empty for none.
func cluster(jobs map[string][]string, task, rpcLayer string) string {
	b, err := json.Marshal(jobs) // job names in sorted order: a stable value
	if err != nil {
		panic(fmt.Sprintf("marshal a map of strings: %v", err)) // cannot happen
	}
	out := `{"cluster":` + string(b)
	if task != "" {
		out += `,"task":` + task
	}
	if rpcLayer != "" {
		out += `,"rpc_layer":"` + rpcLayer + `"`
	}
	return out + "}"
}
