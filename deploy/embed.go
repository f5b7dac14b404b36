// Package deploy holds faultline's manifests (the CRD, the controller and the node agent's
// DaemonSet) as kustomizations, and embeds them so that `launcher install` ships exactly
// what `kubectl apply --server-side -k deploy/` would apply.
package deploy

import "embed"

// FS holds every manifest and kustomization of deploy/, by path relative to this
// directory (e.g. "crd/faultline.dev_trainingruns.yaml").
//
//go:embed kustomization.yaml crd/*.yaml admission/*.yaml controller/*.yaml daemonset/*.yaml kueue/*.yaml
var FS embed.FS

// TrainingRunCRD is the path in FS of the TrainingRun CRD.
const TrainingRunCRD = "crd/faultline.dev_trainingruns.yaml"

// Components are the parts of an installation, in the order they must be applied: the CRD,
// then the admission policies (so that nothing runs unguarded), then the controller (its
// Namespace comes with it), then the node agent.
var Components = []string{"crd", "admission", "controller", "daemonset"}
