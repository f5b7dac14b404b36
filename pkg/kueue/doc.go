// Package kueue speaks Kueue's Workload API (kueue.x-k8s.io/v1beta2) for faultline: the
// Workload that stands for a TrainingRun, the admission read back from it, and the status
// conditions faultline writes on it as the owner of the job (PodsReady, Finished, the
// admission cleared after an eviction). Everything here is pure: the reconciler reads and
// writes, this package decides.
//
// Kueue's Go module is deliberately not a dependency: its API package alone would move 17 of
// the product's dependencies past what client-go v0.36 was released with (structured-merge-diff,
// kube-openapi among them), and its jobframework brings 1,200 packages (the API server's,
// etcd's client, Volcano's APIs). Objects go through the API as unstructured; the few fields
// faultline reads are mirrored in Workload, with Kueue's JSON names.
package kueue
