package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework/expansion"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EPyTorchEnv: the launcher's controller finds the pytorch plugin next to it, and
// every worker of the Job it creates gets what torchrun reads with its default static
// rendezvous (torch/distributed/run.py: PET_<OPTION>), as Kubeflow Trainer's Torch plugin
// sets it: one node per pod, the pod's completion index as its node rank, pod 0 as the
// master on torchrun's port 29500, and as many processes per pod as the template's GPUs
// (here 2, told to the plugin by the controller through the plugin API); plus
// init_method="env://"'s MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK. The master port
// is declared on the worker container.
func TestE2EPyTorchEnv(t *testing.T) {
	t.Parallel()
	const workers = 2
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startController(t, ns)
	run := newRun("gpt", workers, func(r *v1alpha1.TrainingRun) {
		r.Spec.Framework = "pytorch"
		r.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceName(v1alpha1.ResourceGPU)] = resource.MustParse("2")
	})
	createRun(ctx, t, c, ns, run)
	waitRun(ctx, t, c, ns, run.Name, "every worker Running", runningAttempt(1))
	job, err := c.Client.BatchV1().Jobs(ns).Get(ctx, run.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	master := fmt.Sprintf("gpt-0.gpt.%s.svc", ns)
	for i := range workers {
		env, err := expansion.Worker(job.Spec.Template.Spec.Containers[0].Env, i)
		if err != nil {
			t.Fatalf("resolve env of index %d: %v", i, err)
		}
		want := map[string]string{
			"PET_NNODES":         strconv.Itoa(workers),
			"PET_NPROC_PER_NODE": "2",
			"PET_NODE_RANK":      strconv.Itoa(i),
			"PET_MASTER_ADDR":    master,
			"PET_MASTER_PORT":    "29500",
			"MASTER_ADDR":        master,
			"MASTER_PORT":        "29500",
			"WORLD_SIZE":         strconv.Itoa(workers),
			"RANK":               strconv.Itoa(i),
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("index %d: %s=%q, want %q", i, k, env[k], v)
			}
		}
	}
	if !hasPort(job, 29500) {
		t.Errorf("worker container ports %v: want torchrun's master port 29500 declared", job.Spec.Template.Spec.Containers[0].Ports)
	}
}
