package convert

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// convertCase is one manifest of testdata and what its conversion must say.
type convertCase struct {
	opts      Options
	workers   int32
	framework string
	differs   bool
	// issues are substrings, each of which some issue's String() must hold.
	issues []string
	// check looks at the run further.
	check func(t *testing.T, run *v1alpha1.TrainingRun)
}

// runCases converts each testdata/<name>.yaml, checks it against its case, and compares the
// run (as YAML) and its issues with testdata/<name>.golden.
func runCases(t *testing.T, cases map[string]convertCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := Convert(load(t, name+".yaml"), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			run := res.Run
			if run.Spec.Workers != tc.workers || run.Spec.Framework != tc.framework {
				t.Errorf("workers %d, framework %q; want %d, %q", run.Spec.Workers, run.Spec.Framework, tc.workers, tc.framework)
			}
			if res.Differs() != tc.differs {
				t.Errorf("Differs() = %v, want %v; issues:\n%s", res.Differs(), tc.differs, issues(res))
			}
			for _, want := range tc.issues {
				if !strings.Contains(issues(res), want) {
					t.Errorf("no issue says %q; issues:\n%s", want, issues(res))
				}
			}
			// What the CRD requires of every run, whatever the source.
			if p := run.Spec.Template.Spec.RestartPolicy; p != "Never" {
				t.Errorf("template restartPolicy %q, want Never", p)
			}
			if len(run.Spec.Template.Spec.Containers) == 0 || run.Spec.Template.Spec.Containers[0].Image == "" {
				t.Errorf("template has no container with an image: %+v", run.Spec.Template.Spec.Containers)
			}
			if tc.check != nil {
				tc.check(t, run)
			}
			out := manifest(t, run)
			golden(t, name, fmt.Sprintf("%s# %s\n%s", out, res.Source, issues(res)))
		})
	}
}

// TestConvertJobSet: JobSets in the shape of JobSet's own examples. One replicated job
// becomes the gang (replicas × parallelism workers); its pods' JobSet addresses become the
// run's; torchrun makes the framework pytorch; the restarts a JobSet allows after any failure
// (maxRestarts, each Job's backoffLimit) are kept per class with a rule for application
// errors. What a run cannot do (a second replicated job, JobSet's failure rules, a pod
// failure policy that fails on disruption, JobSet's own annotations read by the program,
// JOB_COMPLETION_INDEX counted per Job) makes the conversion differ.
func TestConvertJobSet(t *testing.T) {
	runCases(t, map[string]convertCase{
		"jobset-pytorch": {
			workers: 4, framework: "pytorch",
			issues: []string{
				"note: spec.replicatedJobs[0].template.spec.template.spec.containers: the address pytorch-workers-0-0.pytorch is the run's pytorch-0.pytorch",
				"fails the job at its first failure; the run keeps faultline's defaults",
				"spec.framework: pytorch, since container pytorch starts torchrun",
			},
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				if v := env(run, "MASTER_ADDR"); v != "pytorch-0.pytorch" {
					t.Errorf("MASTER_ADDR %q, want pod 0 of the run, pytorch-0.pytorch", v)
				}
				if len(run.Spec.FailurePolicy.Rules) != 0 || run.Spec.FailurePolicy.MaxRestarts != (v1alpha1.RestartBudgets{}) {
					t.Errorf("failure policy %+v, want faultline's defaults (the JobSet fails at its first failure)", run.Spec.FailurePolicy)
				}
			},
		},
		"jobset-max-restarts": {
			workers: 4, framework: "none", differs: true,
			issues: []string{
				"differs: spec.replicatedJobs[1]: replicated job driver (1 pod) is not carried over",
				"restarts on any failure, up to 3 times",
				"note: metadata.labels.kueue.x-k8s.io/queue-name: the run queues in Kueue's LocalQueue team-a",
			},
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				fp := run.Spec.FailurePolicy
				if want := (v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](3), Application: ptr.To[int32](3), Unknown: ptr.To[int32](3)}); !cmp.Equal(fp.MaxRestarts, want) {
					t.Errorf("maxRestarts %s, want 3 of each class", cmp.Diff(want, fp.MaxRestarts))
				}
				if len(fp.Rules) != 1 || fp.Rules[0].Name != RuleRestartApplication || fp.Rules[0].Action != v1alpha1.ActionRestartRun {
					t.Errorf("rules %+v, want %s restarting application errors", fp.Rules, RuleRestartApplication)
				}
				if run.Namespace != "research" || run.Labels[v1alpha1.LabelQueueName] != "team-a" {
					t.Errorf("namespace %q, labels %v: want the JobSet's", run.Namespace, run.Labels)
				}
			},
		},
		"jobset-jax-multislice": {
			workers: 4, framework: "jax", differs: true,
			issues: []string{
				"differs: spec.failurePolicy.rules[0]: rule host-maintenance (RestartJobSetAndIgnoreMaxRestarts on reasons PodFailurePolicy) is not carried over",
				"differs: spec.replicatedJobs[0].template.spec.podFailurePolicy",
				"differs: spec.replicatedJobs[0].template.spec.template.spec.containers[jax].env[JOB_INDEX]: reads metadata.annotations['jobset.sigs.k8s.io/job-index']",
				"JOB_COMPLETION_INDEX counts within one of the JobSet's 2 Jobs (0-1)",
				"the address jax-slice-0-0.jax is the run's jax-0.jax",
				"jax-reader is kept",
			},
		},
	})
}

// TestConvertPyTorchJob: PyTorchJobs of Kubeflow's training-operator examples. The master
// is index 0 and the workers follow, so ranks stay; the operator's master port and
// nprocPerNode become the pytorch plugin's options, so every variable has the operator's
// value; OnFailure with a backoffLimit keeps restarting on any failure. Elastic membership, a
// deadline and a gang scheduler's policy make the conversion differ.
func TestConvertPyTorchJob(t *testing.T) {
	runCases(t, map[string]convertCase{
		"pytorchjob-simple": {
			workers: 2, framework: "pytorch",
			issues: []string{"restartPolicy OnFailure without a backoffLimit (no limit there; 10 here)"},
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				want := map[string]string{"port": "23456", "nprocPerNode": "auto"}
				if diff := cmp.Diff(want, run.Spec.FrameworkOptions); diff != "" {
					t.Errorf("frameworkOptions (-want +got):\n%s", diff)
				}
				if env(run, "PYTHONUNBUFFERED") != "1" {
					t.Errorf("PYTHONUNBUFFERED not set to 1, as the operator sets it")
				}
			},
		},
		"pytorchjob-nccl": {
			workers: 4, framework: "pytorch",
			issues: []string{"the address mnist-nccl-master-0 is the run's mnist-nccl-0.mnist-nccl", "runPolicy.backoffLimit 3"},
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				if got := run.Spec.Template.Spec.Containers[0].Args; !cmp.Equal(got, []string{"--backend", "nccl", "--master", "mnist-nccl-0.mnist-nccl:23456"}) {
					t.Errorf("args %q, want the master's address rewritten", got)
				}
				if run.Spec.FrameworkOptions["nprocPerNode"] != "2" || ptr.Deref(run.Spec.TTLSecondsAfterFinished, 0) != 3600 {
					t.Errorf("nprocPerNode %q, ttl %v: want the job's 2 and 3600", run.Spec.FrameworkOptions["nprocPerNode"], run.Spec.TTLSecondsAfterFinished)
				}
				if ptr.Deref(run.Spec.FailurePolicy.MaxRestarts.Application, -1) != 3 {
					t.Errorf("application budget %v, want the backoffLimit 3", run.Spec.FailurePolicy.MaxRestarts.Application)
				}
			},
		},
		"pytorchjob-elastic": {
			workers: 2, framework: "pytorch", differs: true,
			issues: []string{
				"differs: spec.elasticPolicy: minReplicas 1, maxReplicas 2",
				"differs: spec.runPolicy.activeDeadlineSeconds",
				"differs: spec.runPolicy.schedulingPolicy",
				"torchrun's restarts (100) are left at 0",
			},
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				if run.Spec.FrameworkOptions["rendezvous"] != "c10d" {
					t.Errorf("frameworkOptions %v, want rendezvous c10d", run.Spec.FrameworkOptions)
				}
			},
		},
	})
}

// TestConvertTrainJob: TrainJobs of Kubeflow Trainer's built-in runtimes. The runtime gives
// the framework and, when the TrainJob names none, the image; numNodes the workers; the
// patches of the trainer's pods land on the template. Initializers, a deadline and the
// runtimes faultline cannot run (torchtune's, MPI's) make the conversion differ.
func TestConvertTrainJob(t *testing.T) {
	runCases(t, map[string]convertCase{
		"trainjob-torch": {
			workers: 4, framework: "pytorch",
			issues: []string{"Kueue's LocalQueue team-a-queue"},
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				s := run.Spec.Template.Spec
				if s.ServiceAccountName != "trainer" || len(s.Volumes) != 1 || len(s.Tolerations) != 1 || len(s.Containers[0].VolumeMounts) != 1 {
					t.Errorf("the runtime patch did not land: %+v", s)
				}
				if s.Containers[0].Image != "pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime" {
					t.Errorf("image %q, want the runtime's", s.Containers[0].Image)
				}
				if _, set := run.Spec.FrameworkOptions["nprocPerNode"]; set {
					t.Errorf("nprocPerNode set (%v): with GPUs, Trainer's auto and the plugin's default agree", run.Spec.FrameworkOptions)
				}
			},
		},
		"trainjob-jax": {
			workers: 2, framework: "jax",
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				if run.Spec.Template.Spec.NodeSelector["cloud.google.com/machine-family"] != "c3" {
					t.Errorf("node selector %v, want the override's", run.Spec.Template.Spec.NodeSelector)
				}
			},
		},
		"trainjob-initializer": {
			workers: 1, framework: "none", differs: true,
			issues: []string{"differs: spec.initializer", "differs: spec.activeDeadlineSeconds", "runtime torchtune-llama3.2-1b runs torchtune's recipe"},
		},
	})
}

// TestConvertRefuses: what convert cannot read at all is an error, not a run.
func TestConvertRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"another kind":         "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n",
		"old JobSet":           "apiVersion: jobset.x-k8s.io/v1alpha1\nkind: JobSet\nmetadata: {name: j}\n",
		"no replicated jobs":   "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: j}\nspec: {}\n",
		"unknown runtime":      "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: j}\nspec: {runtimeRef: {name: mine}}\n",
		"pytorch as jax":       "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: j}\nspec: {pytorchReplicaSpecs: {Worker: {}}}\n",
		"no replicas of torch": "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: j}\nspec: {pytorchReplicaSpecs: {}}\n",
	} {
		t.Run(name, func(t *testing.T) {
			o := Options{}
			if name == "pytorch as jax" {
				o.Framework = "jax"
			}
			if res, err := Convert(decode(t, []byte(doc)), o); err == nil {
				t.Errorf("Convert = %+v, want an error", res.Run)
			}
		})
	}
}

// TestConvertUnknownField: a field convert does not know is reported, never dropped in silence.
func TestConvertUnknownField(t *testing.T) {
	doc := "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: j}\nspec:\n  gangPolicy: {}\n  replicatedJobs:\n  - name: w\n    template: {spec: {template: {spec: {containers: [{name: c, image: i}]}}}}\n"
	res, err := Convert(decode(t, []byte(doc)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Differs() || !strings.Contains(issues(res), `differs: spec.gangPolicy: not a field this converter knows`) {
		t.Errorf("issues:\n%s\nwant spec.gangPolicy reported as not carried over", issues(res))
	}
}

// manifest is the run as `launcher convert` prints it: without status, and without the
// backoff a Go struct cannot leave out (pkg/cli's YAML).
func manifest(t *testing.T, run *v1alpha1.TrainingRun) []byte {
	t.Helper()
	b, err := yaml.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "status")
	delete(m["metadata"].(map[string]any), "creationTimestamp")
	if fp, ok := m["spec"].(map[string]any)["failurePolicy"].(map[string]any); ok && run.Spec.FailurePolicy.Backoff == (v1alpha1.Backoff{}) {
		delete(fp, "backoff")
		if mr, ok := fp["maxRestarts"].(map[string]any); ok && len(mr) == 0 {
			delete(fp, "maxRestarts")
		}
		if len(fp) == 0 {
			delete(m["spec"].(map[string]any), "failurePolicy")
		}
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func issues(res *Result) string {
	var b strings.Builder
	for _, i := range res.Issues {
		b.WriteString(i.String() + "\n")
	}
	return b.String()
}

func env(run *v1alpha1.TrainingRun, name string) string {
	for _, e := range run.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func load(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, b)
}

func decode(t *testing.T, b []byte) *unstructured.Unstructured {
	t.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./pkg/convert -update` to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; `go test ./pkg/convert -update` accepts it):\n%s", path, diff)
	}
}
