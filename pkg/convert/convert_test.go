package convert

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
// run's; torchrun makes the framework pytorch; a JobSet that fails at its first failure
// makes a run that does too (a budget of 0 for each class); the restarts a JobSet allows
// after any failure (maxRestarts, each Job's backoffLimit) are kept per class with a rule
// for application errors, which differs (the classes' budgets add up). What a run cannot do
// (a second replicated job, JobSet's failure rules, a pod failure policy that fails on
// disruption, JobSet's own annotations read by the program, JOB_COMPLETION_INDEX counted per
// Job) makes the conversion differ.
func TestConvertJobSet(t *testing.T) {
	runCases(t, map[string]convertCase{
		"jobset-pytorch": {
			workers: 4, framework: "pytorch",
			issues: []string{
				"note: spec.replicatedJobs[0].template.spec.template.spec.containers: the address pytorch-workers-0-0.pytorch is the run's pytorch-0.pytorch",
				"note: spec.failurePolicy: the JobSet (maxRestarts 0, each Job's backoffLimit 0) fails the job at its first failure; so does the run",
				"spec.framework: pytorch, since container pytorch starts torchrun",
			},
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				if v := env(run, "MASTER_ADDR"); v != "pytorch-0.pytorch" {
					t.Errorf("MASTER_ADDR %q, want pod 0 of the run, pytorch-0.pytorch", v)
				}
				none := v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](0), Application: ptr.To[int32](0), Unknown: ptr.To[int32](0)}
				if fp := run.Spec.FailurePolicy; len(fp.Rules) != 0 || !cmp.Equal(fp.MaxRestarts, none) || fp.RestartMode != "" {
					t.Errorf("failure policy %+v, want no restart of any class (the JobSet fails at its first failure)", fp)
				}
			},
		},
		"jobset-max-restarts": {
			workers: 4, framework: "none", differs: true,
			issues: []string{
				"differs: spec.replicatedJobs[1]: replicated job driver (1 pod) is not carried over",
				"differs: spec.failurePolicy: the JobSet (maxRestarts 3, each Job's backoffLimit 0) restarts after any failure, up to 3 times in all",
				"so it may restart up to 9 times where the source stopped at 3",
				"note: spec.failurePolicy.restartStrategy: Recreate: a restart recreates the gang's pods",
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
				if fp.RestartMode != v1alpha1.RestartModeRecreate {
					t.Errorf("restartMode %q, want Recreate: the JobSet recreates its Jobs", fp.RestartMode)
				}
				if run.Namespace != "research" || run.Labels[v1alpha1.LabelQueueName] != "team-a" {
					t.Errorf("namespace %q, labels %v: want the JobSet's", run.Namespace, run.Labels)
				}
			},
		},
		"jobset-per-index": {
			workers: 4, framework: "none", differs: true,
			issues: []string{
				"differs: spec.replicatedJobs[0].template.spec.backoffLimitPerIndex: kept: the run's restartScope is Index and each index is retried 2 times on its own",
				"differs: spec.failurePolicy.maxRestarts: 1, the JobSet's restarts of every Job after one failed, is not carried over",
			},
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				if run.Spec.RestartScope != v1alpha1.RestartScopeIndex || ptr.Deref(run.Spec.BackoffLimitPerIndex, -1) != 2 || ptr.Deref(run.Spec.MaxFailedIndexes, -1) != 1 {
					t.Errorf("restartScope %q, backoffLimitPerIndex %v, maxFailedIndexes %v: want Index, 2, 1", run.Spec.RestartScope, run.Spec.BackoffLimitPerIndex, run.Spec.MaxFailedIndexes)
				}
				if fp := run.Spec.FailurePolicy; len(fp.Rules) > 0 || fp.MaxRestarts != (v1alpha1.RestartBudgets{}) || fp.RestartMode != "" {
					t.Errorf("failure policy %+v: want none, which the CRD refuses with restartScope Index", fp)
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
// value; the run succeeds when the master does (Leader), as the job did; Never restarts
// nothing, so neither does the run. OnFailure keeps restarting on any failure, but restarts
// the gang where the operator restarted one container, and pods left running at the end
// (cleanPodPolicy None, the default), elastic membership, a deadline and a gang scheduler's
// policy make the conversion differ.
func TestConvertPyTorchJob(t *testing.T) {
	runCases(t, map[string]convertCase{
		"pytorchjob-simple": {
			workers: 2, framework: "pytorch", differs: true,
			issues: []string{
				"restartPolicy OnFailure without a runPolicy.backoffLimit restarts after any failure, without limit; so does the run, through rule restart-every-failure",
				"where the source restarted the failed container in its pod",
				"differs: spec.runPolicy.cleanPodPolicy: unset, None",
			},
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				rules := []v1alpha1.FailurePolicyRule{{Name: RuleRestartEveryFailure, Action: v1alpha1.ActionRestartRunIgnoreBudget}}
				if diff := cmp.Diff(rules, run.Spec.FailurePolicy.Rules); diff != "" {
					t.Errorf("rules (-want +got):\n%s", diff)
				}
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
			workers: 4, framework: "pytorch", differs: true,
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
		"pytorchjob-never": {
			workers: 3, framework: "pytorch",
			issues: []string{
				"note: spec.pytorchReplicaSpecs.Master.restartPolicy: restartPolicy Never fails the job at its first failure; so does the run",
				"note: spec.pytorchReplicaSpecs.Master: the run succeeds when index 0, the Master, exits 0 (successPolicy Leader)",
				"note: spec.runPolicy.cleanPodPolicy: Running",
			},
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				if run.Spec.SuccessPolicy != v1alpha1.SuccessPolicyLeader {
					t.Errorf("successPolicy %q, want Leader: a PyTorchJob succeeds when its Master does", run.Spec.SuccessPolicy)
				}
				none := v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](0), Application: ptr.To[int32](0), Unknown: ptr.To[int32](0)}
				if diff := cmp.Diff(none, run.Spec.FailurePolicy.MaxRestarts); diff != "" {
					t.Errorf("maxRestarts (-want +got), want no restart of any class:\n%s", diff)
				}
			},
		},
		"pytorchjob-elastic": {
			workers: 2, framework: "pytorch", differs: true,
			issues: []string{
				"differs: spec.elasticPolicy: minReplicas 1, maxReplicas 2",
				"differs: spec.runPolicy.activeDeadlineSeconds",
				"differs: spec.runPolicy.schedulingPolicy",
				"differs: spec.elasticPolicy.maxRestarts: torchrun restarted its workers in their pods up to 100 times",
				"differs: spec.elasticPolicy: an elastic PyTorchJob without a Master succeeds when any Worker does",
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
// patches of the trainer's pods land on the template. The runtime's Job retries a failed
// container 6 times (the Job API's backoffLimit): kept per class, it differs, as do
// initializers, a deadline and the runtimes faultline cannot run (torchtune's, MPI's).
func TestConvertTrainJob(t *testing.T) {
	runCases(t, map[string]convertCase{
		"trainjob-torch": {
			workers: 4, framework: "pytorch", differs: true,
			issues: []string{
				"Kueue's LocalQueue team-a-queue",
				"differs: spec.runtimeRef: the runtime's JobSet (no failurePolicy; its Job's backoffLimit unset, 6) restarts after any failure, up to 6 times in all",
			},
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
			workers: 2, framework: "jax", differs: true,
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

// TestConvertSaysEverySemanticChange: where the run would behave differently from its
// source, a conversion says so: an issue that differs, at the source's field, saying why.
// One case per change: the restart limits and scopes a TrainingRun cannot say as the source
// did, the cleanups and successes it does its own way, the keys and settings it does not
// read. Where the run can say the source's limits (per-index budgets), it keeps them.
func TestConvertSaysEverySemanticChange(t *testing.T) {
	const jobField = "spec.replicatedJobs[0].template.spec"
	for name, tc := range map[string]struct {
		doc string
		// field is the source's field the issue names, why a part of its message.
		field, why string
		// check looks at the run further.
		check func(t *testing.T, run *v1alpha1.TrainingRun)
	}{
		// JobSet.
		"jobset: maxRestarts beside backoffLimitPerIndex": {
			doc:   jobSetDoc(1, "failurePolicy: {maxRestarts: 2}", "backoffLimitPerIndex: 1"),
			field: "spec.failurePolicy.maxRestarts",
			why:   "2, the JobSet's restarts of every Job after one failed, is not carried over: in restartScope Index",
		},
		"jobset: per-index budgets kept": {
			doc:   jobSetDoc(1, "", "backoffLimitPerIndex: 2, maxFailedIndexes: 1"),
			field: jobField + ".backoffLimitPerIndex",
			why:   "a failure faultline proves the infrastructure's (a disruption, a GPU fault, a lost node) does not count there",
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				want := v1alpha1.TrainingRunSpec{RestartScope: v1alpha1.RestartScopeIndex, BackoffLimitPerIndex: ptr.To[int32](2), MaxFailedIndexes: ptr.To[int32](1)}
				got := v1alpha1.TrainingRunSpec{RestartScope: run.Spec.RestartScope, BackoffLimitPerIndex: run.Spec.BackoffLimitPerIndex, MaxFailedIndexes: run.Spec.MaxFailedIndexes}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("per-index budgets not kept (-want +got):\n%s", diff)
				}
				if fp := run.Spec.FailurePolicy; len(fp.Rules) > 0 || fp.MaxRestarts != (v1alpha1.RestartBudgets{}) {
					t.Errorf("failure policy %+v: the CRD refuses rules and budgets with restartScope Index", fp)
				}
			},
		},
		"jobset: maxFailedIndexes per Job becomes the gang's": {
			doc:   jobSetDoc(2, "", "backoffLimitPerIndex: 1, maxFailedIndexes: 1"),
			field: jobField + ".maxFailedIndexes",
			why:   "maxFailedIndexes 1 limits the failed indexes of the whole gang of 4, where each of the JobSet's 2 Jobs allowed 1 of its own 2 indexes to fail",
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				if got := ptr.Deref(run.Spec.MaxFailedIndexes, -1); got != 1 {
					t.Errorf("maxFailedIndexes %d, want the Job's 1", got)
				}
			},
		},
		"jobset: a Job with a failed index ended the JobSet": {
			doc:   jobSetDoc(2, "", "backoffLimitPerIndex: 1"),
			field: jobField + ".backoffLimitPerIndex",
			why:   "the JobSet failed as soon as one of its 2 Jobs ended with a failed index",
		},
		"jobset: backoffLimit beside backoffLimitPerIndex": {
			doc:   jobSetDoc(1, "", "backoffLimitPerIndex: 1, backoffLimit: 3"),
			field: jobField + ".backoffLimit",
			why:   "the Job's limit on all its pods' failures beside the per-index ones, is not carried over",
		},
		"jobset: one budget becomes one per class": {
			doc:   jobSetDoc(1, "failurePolicy: {maxRestarts: 3}", "backoffLimit: 0"),
			field: "spec.failurePolicy",
			why:   "so it may restart up to 9 times where the source stopped at 3",
		},
		"jobset: a Job restarts the failed pod alone": {
			doc:   jobSetDoc(1, "", "backoffLimit: 2"),
			field: "spec.failurePolicy",
			why:   "each restart restarts the whole gang, where the source restarted only the failed pod, up to the Job's backoffLimit 2",
		},
		"jobset: a Job without backoffLimit retries 6 times": {
			doc:   jobSetDoc(1, "", ""),
			field: "spec.failurePolicy",
			why:   "the JobSet (maxRestarts 0, each Job's backoffLimit 6) restarts after any failure, up to 6 times in all",
		},
		"jobset: each Job's backoffLimit becomes the gang's": {
			doc:   jobSetDoc(2, "", "backoffLimit: 1"),
			field: "spec.failurePolicy",
			why:   "up to backoffLimit 1 in each of its 2 Jobs",
		},
		"jobset: a pod failure policy that ignores disruptions": {
			doc:   jobSetDoc(1, "", "backoffLimit: 0, podFailurePolicy: {rules: [{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}]}"),
			field: jobField + ".podFailurePolicy",
			why:   "the Job replaced such a pod alone, without counting it; the run restarts the whole gang on a disruption",
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				fp := run.Spec.FailurePolicy
				if len(fp.Rules) != 1 || fp.Rules[0].Name != RuleIgnoreDisruptions || fp.Rules[0].Action != v1alpha1.ActionRestartRunIgnoreBudget {
					t.Errorf("rules %+v, want %s restarting disruptions without budget", fp.Rules, RuleIgnoreDisruptions)
				}
				if ptr.Deref(fp.MaxRestarts.Infrastructure, -1) != 0 {
					t.Errorf("infrastructure budget %v, want 0: every other failure failed the JobSet", fp.MaxRestarts.Infrastructure)
				}
			},
		},
		"jobset: a pod failure policy with other rules": {
			doc:   jobSetDoc(1, "", "backoffLimit: 0, podFailurePolicy: {rules: [{action: FailJob, onExitCodes: {operator: In, values: [42]}}]}"),
			field: jobField + ".podFailurePolicy",
			why:   "not carried over: faultline writes each attempt's podFailurePolicy",
		},
		"jobset: failure policy rules": {
			doc:   jobSetDoc(1, "failurePolicy: {rules: [{name: r, action: FailJobSet, onJobFailureReasons: [PodFailurePolicy]}]}", "backoffLimit: 0"),
			field: "spec.failurePolicy.rules[0]",
			why:   "rule r (FailJobSet on reasons PodFailurePolicy) is not carried over",
		},
		"jobset: DNS only for Ready pods": {
			doc:   jobSetDoc(1, "network: {publishNotReadyAddresses: false}", "backoffLimit: 0"),
			field: "spec.network.publishNotReadyAddresses",
			why:   "the JobSet's DNS named a pod only once it was Ready",
		},
		"jobset: exclusive placement": {
			doc: strings.Replace(jobSetDoc(1, "", "backoffLimit: 0"), "metadata: {name: js}",
				"metadata: {name: js, annotations: {alpha.jobset.sigs.k8s.io/exclusive-topology: cloud.google.com/gke-nodepool}}", 1),
			field: "metadata.annotations.alpha.jobset.sigs.k8s.io/exclusive-topology",
			why:   "faultline's controller does not",
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				if len(run.Annotations) > 0 {
					t.Errorf("annotations %v, want JobSet's left out", run.Annotations)
				}
			},
		},
		"jobset: a Job's own controller": {
			doc:   jobSetDoc(1, "", "backoffLimit: 0, managedBy: example.com/batch"),
			field: jobField + ".managedBy",
			why:   "example.com/batch managed each Job",
		},
		"jobset: a Job's deadline": {
			doc:   jobSetDoc(1, "", "backoffLimit: 0, activeDeadlineSeconds: 60"),
			field: jobField + ".activeDeadlineSeconds",
			why:   "a TrainingRun has no deadline",
		},
		"jobset: a Job's success policy": {
			doc:   jobSetDoc(1, "", "backoffLimit: 0, successPolicy: {rules: [{succeededCount: 1}]}"),
			field: jobField + ".successPolicy",
			why:   "the run succeeds when every worker does",
		},
		"jobset: success of any Job": {
			doc:   jobSetDoc(2, "successPolicy: {operator: Any}", "backoffLimit: 0"),
			field: "spec.successPolicy",
			why:   "Any of []: the run succeeds when every worker does",
		},
		"jobset: another coordinator": {
			doc:   jobSetDoc(2, "coordinator: {replicatedJob: w, jobIndex: 1}", "backoffLimit: 0"),
			field: "spec.coordinator",
			why:   "the run's coordinator is always index 0",
		},
		"jobset: its own controller": {
			doc:   jobSetDoc(1, "managedBy: kueue.x-k8s.io/multikueue", "backoffLimit: 0"),
			field: "spec.managedBy",
			why:   "kueue.x-k8s.io/multikueue managed the JobSet",
		},
		"jobset: volume claim policies": {
			doc:   jobSetDoc(1, "volumeClaimPolicies: [{templates: []}]", "backoffLimit: 0"),
			field: "spec.volumeClaimPolicies",
			why:   "create the PersistentVolumeClaims yourself",
		},

		// PyTorchJob.
		"pytorchjob: restartPolicy ExitCode": {
			doc:   pyTorchJobDoc("runPolicy: {cleanPodPolicy: All}", "restartPolicy: ExitCode"),
			field: "spec.pytorchReplicaSpecs.Master.restartPolicy",
			why:   "a TrainingRun does not match exit codes",
		},
		"pytorchjob: OnFailure restarts a container alone": {
			doc:   pyTorchJobDoc("runPolicy: {cleanPodPolicy: All, backoffLimit: 2}", "restartPolicy: OnFailure"),
			field: "spec.pytorchReplicaSpecs.Master.restartPolicy",
			why:   "each restart restarts the whole gang, where the source restarted the failed container in its pod",
		},
		"pytorchjob: OnFailure without a limit": {
			doc:   pyTorchJobDoc("runPolicy: {cleanPodPolicy: All}", "restartPolicy: OnFailure"),
			field: "spec.pytorchReplicaSpecs.Master.restartPolicy",
			why:   "restarts after any failure, without limit; so does the run, through rule " + RuleRestartEveryFailure,
		},
		"pytorchjob: pods left running at the end": {
			doc:   pyTorchJobDoc("", "restartPolicy: Never"),
			field: "spec.runPolicy.cleanPodPolicy",
			why:   "the operator left running the pods that still ran when the job ended",
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				if run.Spec.SuccessPolicy != v1alpha1.SuccessPolicyLeader {
					t.Errorf("successPolicy %q, want Leader: the PyTorchJob succeeds when its Master does", run.Spec.SuccessPolicy)
				}
			},
		},
		"pytorchjob: torchrun's own restarts": {
			doc:   pyTorchJobDoc("runPolicy: {cleanPodPolicy: All}, elasticPolicy: {minReplicas: 2, maxReplicas: 2, maxRestarts: 3}", "restartPolicy: Never"),
			field: "spec.elasticPolicy.maxRestarts",
			why:   "torchrun restarted its workers in their pods up to 3 times",
		},
		"pytorchjob: torchrun's rendezvous settings": {
			doc:   pyTorchJobDoc("runPolicy: {cleanPodPolicy: All}, elasticPolicy: {minReplicas: 2, maxReplicas: 2, rdzvConf: [{key: join_timeout, value: '600'}]}", "restartPolicy: Never"),
			field: "spec.elasticPolicy.rdzvConf",
			why:   "its timeouts among them",
		},
		"pytorchjob: elastic success of any worker": {
			doc: "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: pj}\nspec: {runPolicy: {cleanPodPolicy: All}, elasticPolicy: {minReplicas: 2, maxReplicas: 2}, " +
				"pytorchReplicaSpecs: {Worker: {replicas: 2, restartPolicy: Never, template: {spec: {containers: [{name: pytorch, image: i}]}}}}}\n",
			field: "spec.elasticPolicy",
			why:   "an elastic PyTorchJob without a Master succeeds when any Worker does",
		},
		"pytorchjob: elastic membership": {
			doc:   pyTorchJobDoc("runPolicy: {cleanPodPolicy: All}, elasticPolicy: {minReplicas: 1, maxReplicas: 2}", "restartPolicy: Never"),
			field: "spec.elasticPolicy",
			why:   "a run is a gang of exactly 2 pods",
		},

		// TrainJob.
		"trainjob: the runtime's Job retries 6 times": {
			doc:   trainJobDoc(""),
			field: "spec.runtimeRef",
			why:   "its Job's backoffLimit unset, 6) restarts after any failure, up to 6 times in all",
			check: func(t *testing.T, run *v1alpha1.TrainingRun) {
				want := v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](6), Application: ptr.To[int32](6), Unknown: ptr.To[int32](6)}
				if diff := cmp.Diff(want, run.Spec.FailurePolicy.MaxRestarts); diff != "" {
					t.Errorf("maxRestarts (-want +got), want the Job's 6 retries for each class:\n%s", diff)
				}
			},
		},
		"trainjob: exclusive placement of Trainer's JobSet": {
			doc:   trainJobDoc("annotations: {alpha.jobset.sigs.k8s.io/exclusive-topology: kubernetes.io/hostname}, "),
			field: "spec.annotations.alpha.jobset.sigs.k8s.io/exclusive-topology",
			why:   "faultline's controller does not",
		},
		"trainjob: a runtime patch of the trainer's Job": {
			doc: trainJobDoc("runtimePatches: [{manager: m, trainingRuntimeSpec: {template: {spec: {replicatedJobs: [{name: node, template: " +
				"{metadata: {annotations: {alpha.jobset.sigs.k8s.io/exclusive-topology: kubernetes.io/hostname}}}}]}}}}], "),
			field: "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.metadata.annotations.alpha.jobset.sigs.k8s.io/exclusive-topology",
			why:   "faultline's controller does not",
		},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := Convert(decode(t, []byte(tc.doc)), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Differs() {
				t.Errorf("Differs() = false, want true; issues:\n%s", issues(res))
			}
			said := slices.ContainsFunc(res.Issues, func(i Issue) bool {
				return i.Differs && i.Field == tc.field && strings.Contains(i.Message, tc.why)
			})
			if !said {
				t.Errorf("no issue differs at %s saying %q; issues:\n%s", tc.field, tc.why, issues(res))
			}
			if tc.check != nil {
				tc.check(t, res.Run)
			}
		})
	}
}

// jobSetDoc is a JobSet of one replicated job of replicas Jobs of 2 pods each, with spec
// and job the entries of its spec and of its Jobs' spec (YAML flow mappings' entries).
func jobSetDoc(replicas int, spec, job string) string {
	if spec != "" {
		spec += ", "
	}
	if job != "" {
		job += ", "
	}
	return fmt.Sprintf("apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: js}\nspec: {%sreplicatedJobs: [{name: w, replicas: %d, "+
		"template: {spec: {%sparallelism: 2, completions: 2, template: {spec: {containers: [{name: c, image: i}]}}}}}]}\n", spec, replicas, job)
}

// pyTorchJobDoc is a PyTorchJob of a Master and a Worker of one template, with spec the
// entries of its spec and replica those of both replica specs.
func pyTorchJobDoc(spec, replica string) string {
	if spec != "" {
		spec += ", "
	}
	rs := fmt.Sprintf("{replicas: 1, %s, template: {spec: {containers: [{name: pytorch, image: i}]}}}", replica)
	return fmt.Sprintf("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: pj}\nspec: {%spytorchReplicaSpecs: {Master: %s, Worker: %s}}\n", spec, rs, rs)
}

// trainJobDoc is a TrainJob of the torch-distributed runtime on 2 nodes, with spec entries
// of its spec before the trainer (each ending with ", ").
func trainJobDoc(spec string) string {
	return "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec: {runtimeRef: {name: torch-distributed}, " + spec +
		"trainer: {numNodes: 2, command: [torchrun, t.py]}}\n"
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
