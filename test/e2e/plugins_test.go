package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework/expansion"
	"github.com/faultline-dev/faultline/test/cluster"
)

// frameworkRun creates a run of framework with workers workers under its own controller and
// returns the env of the worker container of index i, resolved as the kubelet would, for
// every index, read from the Job the controller created.
func frameworkEnv(t *testing.T, framework string, workers int32) (string, []map[string]string, *batchv1.Job) {
	t.Helper()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startController(t, ns)
	run := newRun("llm", workers, func(r *v1alpha1.TrainingRun) { r.Spec.Framework = framework })
	createRun(ctx, t, c, ns, run)
	waitRun(ctx, t, c, ns, run.Name, "every worker Running", runningAttempt(1))
	job, err := c.Client.BatchV1().Jobs(ns).Get(ctx, run.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var envs []map[string]string
	for i := range int(workers) {
		env, err := expansion.Worker(job.Spec.Template.Spec.Containers[0].Env, i)
		if err != nil {
			t.Fatalf("resolve env of index %d: %v", i, err)
		}
		envs = append(envs, env)
	}
	return ns, envs, job
}

func hasPort(job *batchv1.Job, port int32) bool {
	for _, p := range job.Spec.Template.Spec.Containers[0].Ports {
		if p.ContainerPort == port {
			return true
		}
	}
	return false
}

// TestE2ETensorFlowEnv: every worker gets the TF_CONFIG of MultiWorkerMirroredStrategy,
// https://www.tensorflow.org/guide/distributed_training#setting_up_the_tf_config_environment_variable:
// cluster.worker lists every worker's stable address, in index order, and task is
// {type: worker, index: <the pod's completion index>}.
func TestE2ETensorFlowEnv(t *testing.T) {
	t.Parallel()
	const workers = 4
	ns, envs, job := frameworkEnv(t, "tensorflow", workers)
	var want []string
	for i := range workers {
		want = append(want, fmt.Sprintf("llm-%d.llm.%s.svc:2222", i, ns))
	}
	for i, env := range envs {
		var cfg struct {
			Cluster map[string][]string `json:"cluster"`
			Task    struct {
				Type  string `json:"type"`
				Index *int   `json:"index"`
			} `json:"task"`
		}
		if err := json.Unmarshal([]byte(env["TF_CONFIG"]), &cfg); err != nil {
			t.Fatalf("index %d: TF_CONFIG %q is not JSON: %v", i, env["TF_CONFIG"], err)
		}
		if got := strings.Join(cfg.Cluster["worker"], ","); got != strings.Join(want, ",") || len(cfg.Cluster) != 1 {
			t.Errorf("index %d: cluster %v, want only worker: %v", i, cfg.Cluster, want)
		}
		if cfg.Task.Type != "worker" || cfg.Task.Index == nil || *cfg.Task.Index != i {
			t.Errorf("index %d: task %+v, want {worker %d}", i, cfg.Task, i)
		}
		if env[v1alpha1.EnvIndex] != strconv.Itoa(i) || env[v1alpha1.EnvWorldSize] != strconv.Itoa(workers) {
			t.Errorf("index %d: FAULTLINE_INDEX=%q FAULTLINE_WORLD_SIZE=%q", i, env[v1alpha1.EnvIndex], env[v1alpha1.EnvWorldSize])
		}
	}
	if !hasPort(job, 2222) {
		t.Errorf("worker container ports %v: want TensorFlow's 2222 declared", job.Spec.Template.Spec.Containers[0].Ports)
	}
}

// TestE2EJaxEnv: the variables jax.distributed.initialize reads (jax/_src/distributed.py:
// JAX_COORDINATOR_ADDRESS; process count and id passed from JAX_NUM_PROCESSES and
// JAX_PROCESS_ID) name index 0 as the coordinator and give each pod its own process id.
func TestE2EJaxEnv(t *testing.T) {
	t.Parallel()
	const workers = 3
	ns, envs, job := frameworkEnv(t, "jax", workers)
	for i, env := range envs {
		want := map[string]string{
			"JAX_COORDINATOR_ADDRESS": fmt.Sprintf("llm-0.llm.%s.svc:1234", ns),
			"JAX_NUM_PROCESSES":       strconv.Itoa(workers),
			"JAX_PROCESS_ID":          strconv.Itoa(i),
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("index %d: %s=%q, want %q", i, k, env[k], v)
			}
		}
	}
	if !hasPort(job, 1234) {
		t.Errorf("worker container ports %v: want the coordinator's 1234 declared", job.Spec.Template.Spec.Containers[0].Ports)
	}
}

// TestE2EPluginCrashIsReported: a plugin that crashes on every call is restarted once, then
// reported on its run as PluginReady=False with what failed and how to fix it; the run gets
// no Job, and the same controller goes on serving other runs.
func TestE2EPluginCrashIsReported(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctrl := startController(t, ns)
	broken := newRun("broken", 2, func(r *v1alpha1.TrainingRun) { r.Spec.Framework = "crash" })
	createRun(ctx, t, c, ns, broken)
	got := waitRun(ctx, t, c, ns, broken.Name, "PluginReady=False", func(r *v1alpha1.TrainingRun) bool {
		cond := runCondition(r, v1alpha1.ConditionPluginReady)
		return cond != nil && cond.Status == metav1.ConditionFalse
	})
	cond := runCondition(got, v1alpha1.ConditionPluginReady)
	for _, want := range []string{`framework plugin "crash" (`, "faultline-plugin-crash", "crashed again after one restart", "fix:"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("PluginReady message %q does not contain %q", cond.Message, want)
		}
	}
	if cond.Reason != v1alpha1.ReasonPluginError {
		t.Errorf("PluginReady reason %q, want %q", cond.Reason, v1alpha1.ReasonPluginError)
	}
	if _, err := c.Client.BatchV1().Jobs(ns).Get(ctx, broken.Name, metav1.GetOptions{}); err == nil {
		t.Error("a Job was created for a run whose plugin is broken")
	}

	healthy := newRun("healthy", 2)
	createRun(ctx, t, c, ns, healthy)
	waitRun(ctx, t, c, ns, healthy.Name, "every worker Running", runningAttempt(1))
	if ctrl.Exited() {
		t.Fatal("the controller exited after a plugin crashed")
	}
	if got := getRun(ctx, t, c, ns, broken.Name); got.Status.Phase != v1alpha1.PhasePending {
		t.Errorf("broken run phase %s, want Pending while its plugin is broken", got.Status.Phase)
	}
}
