package convert

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// jobSet holds the fields of a JobSet (jobset.x-k8s.io/v1alpha2, sigs.k8s.io/jobset
// api/jobset/v1alpha2/jobset_types.go) that a conversion reads.
type jobSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		ReplicatedJobs []struct {
			Name      string                  `json:"name"`
			GroupName string                  `json:"groupName,omitempty"`
			Template  batchv1.JobTemplateSpec `json:"template"`
			Replicas  *int32                  `json:"replicas,omitempty"`
			DependsOn []map[string]any        `json:"dependsOn,omitempty"`
		} `json:"replicatedJobs,omitempty"`
		Network *struct {
			EnableDNSHostnames       *bool  `json:"enableDNSHostnames,omitempty"`
			Subdomain                string `json:"subdomain,omitempty"`
			PublishNotReadyAddresses *bool  `json:"publishNotReadyAddresses,omitempty"`
		} `json:"network,omitempty"`
		SuccessPolicy *struct {
			Operator             string   `json:"operator"`
			TargetReplicatedJobs []string `json:"targetReplicatedJobs,omitempty"`
		} `json:"successPolicy,omitempty"`
		FailurePolicy *jobSetFailurePolicy `json:"failurePolicy,omitempty"`
		StartupPolicy *struct {
			StartupPolicyOrder string `json:"startupPolicyOrder"`
		} `json:"startupPolicy,omitempty"`
		Suspend     *bool `json:"suspend,omitempty"`
		Coordinator *struct {
			ReplicatedJob string `json:"replicatedJob"`
			JobIndex      int    `json:"jobIndex,omitempty"`
			PodIndex      int    `json:"podIndex,omitempty"`
		} `json:"coordinator,omitempty"`
		ManagedBy               *string          `json:"managedBy,omitempty"`
		TTLSecondsAfterFinished *int32           `json:"ttlSecondsAfterFinished,omitempty"`
		VolumeClaimPolicies     []map[string]any `json:"volumeClaimPolicies,omitempty"`
	} `json:"spec"`
	Status map[string]any `json:"status,omitempty"`
}

// jobSetFailurePolicy is a JobSet's spec.failurePolicy.
type jobSetFailurePolicy struct {
	MaxRestarts     int32  `json:"maxRestarts,omitempty"`
	RestartStrategy string `json:"restartStrategy,omitempty"`
	Rules           []struct {
		Name                        string   `json:"name"`
		Action                      string   `json:"action"`
		OnJobFailureReasons         []string `json:"onJobFailureReasons,omitempty"`
		OnJobFailureMessagePatterns []string `json:"onJobFailureMessagePatterns,omitempty"`
		TargetReplicatedJobs        []string `json:"targetReplicatedJobs,omitempty"`
	} `json:"rules,omitempty"`
}

// jobSetPrefix is the prefix of the labels and annotations JobSet puts on its pods, and
// ends every key it reads (alpha.jobset.sigs.k8s.io/exclusive-topology among them).
const jobSetPrefix = "jobset.sigs.k8s.io/"

// jobSetController is a JobSet's spec.managedBy when it sets none: JobSet's own controller.
const jobSetController = "jobset.sigs.k8s.io/jobset-controller"

// jobBackoffLimit is a Job's backoffLimit when it sets none (the Job API's default).
const jobBackoffLimit = 6

func fromJobSet(obj *unstructured.Unstructured, o Options) (*Result, error) {
	c := &conversion{}
	js := &jobSet{}
	if err := c.decode(obj, js); err != nil {
		return nil, err
	}
	spec := &js.Spec
	if len(spec.ReplicatedJobs) == 0 {
		return nil, fmt.Errorf("JobSet %s: spec.replicatedJobs is empty: nothing to run", js.Name)
	}
	c.newRun(&js.ObjectMeta)
	c.controllerKeys("metadata.labels", jobSetPrefix, "JobSet's controller", c.run.Labels)
	c.controllerKeys("metadata.annotations", jobSetPrefix, "JobSet's controller", c.run.Annotations)

	// One gang: the replicated job with the most pods. The others have templates of their own
	// (a driver, a parameter server): a TrainingRun runs one template, roles aside.
	pods := func(i int) int32 {
		rj := spec.ReplicatedJobs[i]
		return ptr.Deref(rj.Replicas, 1) * ptr.Deref(rj.Template.Spec.Parallelism, 1)
	}
	pick := 0
	for i := range spec.ReplicatedJobs {
		if pods(i) > pods(pick) {
			pick = i
		}
	}
	rj := spec.ReplicatedJobs[pick]
	rjField := fmt.Sprintf("spec.replicatedJobs[%d]", pick)
	for i, other := range spec.ReplicatedJobs {
		if i != pick {
			c.differs(fmt.Sprintf("spec.replicatedJobs[%d]", i), "replicated job %s (%s) is not carried over: a TrainingRun is one gang of "+
				"workers from one template (that of %s, %s); run %s as a Job or TrainingRun of its own", other.Name, plural(pods(i), "pod"), rj.Name, plural(pods(pick), "pod"), other.Name)
		}
	}
	replicas := ptr.Deref(rj.Replicas, 1)
	job := &rj.Template.Spec
	parallelism := ptr.Deref(job.Parallelism, 1)
	c.run.Spec.Workers = replicas * parallelism
	jobField := rjField + ".template.spec"
	if job.Completions != nil && *job.Completions != parallelism {
		c.differs(jobField+".completions", "%d completions at %d at a time: a TrainingRun runs exactly its workers, one pod per index, each to its end", *job.Completions, parallelism)
	}
	if job.CompletionMode == nil || *job.CompletionMode != batchv1.IndexedCompletion {
		c.note(jobField+".completionMode", "the run's pods are Indexed: each has JOB_COMPLETION_INDEX and FAULTLINE_INDEX, its index in the gang")
	}
	if len(rj.DependsOn) > 0 {
		c.differs(rjField+".dependsOn", "not carried over: a TrainingRun starts its whole gang at once")
	}
	c.template(jobField+".template", job.Template)
	tmpl := &c.run.Spec.Template.Spec

	// What each Job did that the run's attempts do their own way.
	backoff := ptr.Deref(job.BackoffLimit, jobBackoffLimit)
	indexed := job.BackoffLimitPerIndex != nil
	if indexed {
		c.perIndex(jobField, job, replicas, parallelism)
	}
	ignoresDisruptions := false
	if pfp := job.PodFailurePolicy; pfp != nil && len(pfp.Rules) > 0 {
		switch {
		case !ignoresDisruptionsOnly(pfp):
			c.differs(jobField+".podFailurePolicy", "not carried over: faultline writes each attempt's podFailurePolicy from its own verdicts; "+
				"express the rules as spec.failurePolicy.rules on causes and classes (docs/migration.md, \"Failure policies\")")
		case indexed:
			c.note(jobField+".podFailurePolicy", "not needed: in restartScope Index a disrupted pod (preemption, eviction, a node shutdown) is retried without counting, as the Job did")
		default:
			ignoresDisruptions = true
		}
	}
	if job.ActiveDeadlineSeconds != nil {
		c.differs(jobField+".activeDeadlineSeconds", "not carried over: a TrainingRun has no deadline; the run runs until its workers end")
	}
	if job.SuccessPolicy != nil {
		c.differs(jobField+".successPolicy", "not carried over: the run succeeds when every worker does (successPolicy AllWorkers) or index 0 does (Leader)")
	}
	if job.PodReplacementPolicy != nil || job.Suspend != nil {
		c.note(jobField, "podReplacementPolicy and suspend of the Job are set on each attempt's Job: a worker never starts before its predecessor is gone, "+
			"and the run's spec.suspend suspends the gang as the JobSet's suspended its Jobs")
	}
	if job.TTLSecondsAfterFinished != nil {
		c.note(jobField+".ttlSecondsAfterFinished", "cleans up the finished Job only: the run's finished pods, which hold no resources, stay until the run is deleted (spec.ttlSecondsAfterFinished)")
	}
	if m := ptr.Deref(job.ManagedBy, batchv1.JobControllerName); m != batchv1.JobControllerName {
		c.differs(jobField+".managedBy", "%s managed each Job; faultline's controller runs the run's attempts", m)
	}
	if len(rj.Template.Labels) > 0 || len(rj.Template.Annotations) > 0 {
		c.controllerKeys(rjField+".template.metadata.annotations", jobSetPrefix, "JobSet's controller", rj.Template.Annotations)
		c.controllerKeys(rjField+".template.metadata.labels", jobSetPrefix, "JobSet's controller", rj.Template.Labels)
		if len(rj.Template.Labels) > 0 || len(rj.Template.Annotations) > 0 {
			c.note(rjField+".template.metadata", "the Job's labels and annotations are not carried over (the pods' are): faultline labels each attempt's Job itself")
		}
	}

	// The pods' names: <jobset>-<rjob>-<job index>-<pod index> under the JobSet's subdomain,
	// the run's <run>-<index> under the Service <run>.
	sub := js.Name
	if n := spec.Network; n != nil {
		if n.Subdomain != "" {
			sub = n.Subdomain
			c.note("spec.network.subdomain", "the run's pods are in the headless Service %s, the run's name", c.run.Name)
		}
		if n.EnableDNSHostnames != nil && !*n.EnableDNSHostnames {
			c.note("spec.network.enableDNSHostnames", "false has no equivalent: every worker of a run has its DNS name")
		}
		if n.PublishNotReadyAddresses != nil && !*n.PublishNotReadyAddresses {
			c.differs("spec.network.publishNotReadyAddresses", "false: the JobSet's DNS named a pod only once it was Ready; "+
				"faultline's Service names every worker as soon as it has an address (a worker that waits for its peers' names to resolve waits less)")
		}
	}
	base := regexp.QuoteMeta(js.Name + "-" + rj.Name)
	pattern := regexp.MustCompile(`\b` + base + `-(\d+)-(\d+)(?:\.(?:` + regexp.QuoteMeta(sub) + `|` + base + `)\b)?`)
	c.rename(jobField+".template.spec.containers", pattern, func(m []string) (int, bool) {
		j, _ := strconv.Atoi(m[1])
		p, _ := strconv.Atoi(m[2])
		if int32(j) >= replicas || int32(p) >= parallelism {
			return 0, false
		}
		return j*int(parallelism) + p, true
	})
	c.fieldRefs(jobField+".template.spec", jobSetPrefix, "FAULTLINE_INDEX is the pod's index in the gang, FAULTLINE_ATTEMPT the attempt, FAULTLINE_RUN the run")
	if replicas > 1 && mentions(tmpl, "JOB_COMPLETION_INDEX") {
		c.differs(jobField+".template.spec.containers", "JOB_COMPLETION_INDEX counts within one of the JobSet's %d Jobs (0-%d); in the run it counts the whole gang (0-%d): "+
			"a program that adds a Job's index to it must use FAULTLINE_INDEX alone", replicas, parallelism-1, replicas*parallelism-1)
	}
	c.framework(o, "")
	if c.run.Spec.Framework == frameworkJAX && tmpl.ServiceAccountName != "" {
		c.note(jobField+".template.spec.serviceAccountName", "%s is kept: for a bare jax.distributed.initialize() it needs to list the namespace's pods "+
			"and get the run's Job (without it, the jax plugin gives the pods an account that can; docs/plugins.md)", tmpl.ServiceAccountName)
	}

	// Policies.
	maxRestarts := int32(0)
	fp := spec.FailurePolicy
	if fp != nil {
		maxRestarts = fp.MaxRestarts
		for i, r := range fp.Rules {
			c.differs(fmt.Sprintf("spec.failurePolicy.rules[%d]", i), "rule %s (%s on %s) is not carried over: faultline judges each failure's cause itself "+
				"and its rules match causes and classes (docs/migration.md, \"Failure policies\")", r.Name, r.Action, ruleMatch(r.OnJobFailureReasons, r.OnJobFailureMessagePatterns))
		}
	}
	if indexed {
		if maxRestarts > 0 {
			c.differs("spec.failurePolicy.maxRestarts", "%d, the JobSet's restarts of every Job after one failed, is not carried over: in restartScope Index "+
				"the run fails once its Job gives up (an index out of retries, or too many failed indexes), and a TrainingRun restarts no gang in that scope "+
				"(the CRD refuses spec.failurePolicy.maxRestarts there). Drop the Job's backoffLimitPerIndex for a Gang-scope run with these restarts", maxRestarts)
		}
		if fp != nil && fp.RestartStrategy != "" && fp.RestartStrategy != "Recreate" && fp.RestartStrategy != "BlockingRecreate" && fp.RestartStrategy != "InPlaceRestart" {
			c.differs("spec.failurePolicy.restartStrategy", "%s is not a strategy this converter knows", fp.RestartStrategy)
		}
	} else {
		c.gangPolicy(gangPolicy{
			jobSet: fp, maxRestarts: maxRestarts, backoff: backoff, replicas: replicas,
			jobField: jobField, ignoresDisruptions: ignoresDisruptions,
		})
	}
	if sp := spec.SuccessPolicy; sp != nil {
		targets := len(sp.TargetReplicatedJobs) == 0 || (len(sp.TargetReplicatedJobs) == 1 && sp.TargetReplicatedJobs[0] == rj.Name)
		switch {
		case sp.Operator == "All" && targets:
		case sp.Operator == "Any" && targets && replicas == 1:
		default:
			c.differs("spec.successPolicy", "%s of %v: the run succeeds when every worker does", sp.Operator, sp.TargetReplicatedJobs)
		}
	}
	if st := spec.StartupPolicy; st != nil && st.StartupPolicyOrder == "InOrder" && len(spec.ReplicatedJobs) > 1 {
		c.differs("spec.startupPolicy", "InOrder is not carried over: the run's gang starts at once")
	}
	if co := spec.Coordinator; co != nil {
		if co.ReplicatedJob == rj.Name && co.JobIndex == 0 && co.PodIndex == 0 {
			c.note("spec.coordinator", "the run's coordinator is index 0, %s-0.%s; the %scoordinator label is not set", c.run.Name, c.run.Name, jobSetPrefix)
		} else {
			c.differs("spec.coordinator", "%s job %d pod %d: the run's coordinator is always index 0 (%s-0.%s)", co.ReplicatedJob, co.JobIndex, co.PodIndex, c.run.Name, c.run.Name)
		}
	}
	c.run.Spec.Suspend = spec.Suspend
	c.run.Spec.TTLSecondsAfterFinished = spec.TTLSecondsAfterFinished
	if m := ptr.Deref(spec.ManagedBy, jobSetController); m != jobSetController {
		c.differs("spec.managedBy", "%s managed the JobSet; faultline's controller runs the run (MultiKueue does not dispatch TrainingRuns)", m)
	}
	if len(spec.VolumeClaimPolicies) > 0 {
		c.differs("spec.volumeClaimPolicies", "not carried over: create the PersistentVolumeClaims yourself and name them in the template's volumes")
	}
	return c.result(JobSetKind, &js.ObjectMeta), nil
}

// perIndex keeps a Job's per-index limits as the run's: restartScope Index with the same
// backoffLimitPerIndex and maxFailedIndexes. What the run counts otherwise differs: a
// failure faultline proves the infrastructure's does not count against an index, and the
// JobSet's Jobs each counted their own indexes where the run counts the whole gang's.
func (c *conversion) perIndex(jobField string, job *batchv1.JobSpec, replicas, parallelism int32) {
	c.run.Spec.RestartScope = v1alpha1.RestartScopeIndex
	c.run.Spec.BackoffLimitPerIndex = job.BackoffLimitPerIndex
	c.run.Spec.MaxFailedIndexes = job.MaxFailedIndexes
	kept := ""
	if f := job.MaxFailedIndexes; f != nil {
		kept = fmt.Sprintf(", and the run fails once more than %d of its indexes failed (spec.maxFailedIndexes)", *f)
	}
	c.differs(jobField+".backoffLimitPerIndex", "kept: the run's restartScope is Index and each index is retried %d times on its own (spec.backoffLimitPerIndex)%s; "+
		"but a failure faultline proves the infrastructure's (a disruption, a GPU fault, a lost node) does not count there: "+
		"the index is retried without limit where the Job counted it", *job.BackoffLimitPerIndex, kept)
	if replicas > 1 {
		field, limit := jobField+".backoffLimitPerIndex", ""
		if f := job.MaxFailedIndexes; f != nil {
			field = jobField + ".maxFailedIndexes"
			limit = fmt.Sprintf("maxFailedIndexes %d limits the failed indexes of the whole gang of %d, where each of the JobSet's %d Jobs allowed %d of its own %d indexes to fail "+
				"(the run fails sooner where the failures are spread over Jobs); and ", *f, replicas*parallelism, replicas, *f, parallelism)
		}
		c.differs(field, "%sthe JobSet failed as soon as one of its %d Jobs ended with a failed index, where the run's one Job goes on until every index of the gang has ended",
			limit, replicas)
	}
	if job.BackoffLimit != nil {
		c.differs(jobField+".backoffLimit", "%d, the Job's limit on all its pods' failures beside the per-index ones, is not carried over: the run's limits are per index", *job.BackoffLimit)
	}
}

// gangPolicy is what a Gang-scope run's failure policy is made of: the JobSet's failure
// policy and the limits of the Jobs of the replicated job the run is made of.
type gangPolicy struct {
	jobSet             *jobSetFailurePolicy
	maxRestarts        int32
	backoff            int32 // each Job's backoffLimit
	replicas           int32 // the Jobs
	jobField           string
	ignoresDisruptions bool // the Jobs' pod failure policy ignores disrupted pods
}

// gangPolicy writes the JobSet's restarts as the run's failure policy. Each Job retries its
// pods backoffLimit times before it fails, and the JobSet restarts every Job maxRestarts
// times after one failed: a failure is retried up to (m+1)(b+1)-1 times. A Job's retry
// replaces only the failed pod, and a disrupted pod its pod failure policy ignores is
// replaced without counting; a run restarts its whole gang.
func (c *conversion) gangPolicy(g gangPolicy) {
	n := min((int64(g.maxRestarts)+1)*(int64(g.backoff)+1)-1, math.MaxInt32)
	a := anyFailure{
		field: "spec.failurePolicy",
		what:  fmt.Sprintf("the JobSet (maxRestarts %d, each Job's backoffLimit %d)", g.maxRestarts, g.backoff),
		n:     int32(n),
	}
	if g.backoff > 0 {
		a.alone = fmt.Sprintf("only the failed pod, up to the Job's backoffLimit %d", g.backoff)
		if g.replicas > 1 {
			a.alone = fmt.Sprintf("only the failed pod, up to backoffLimit %d in each of its %d Jobs (%d failures in all, spread over the Jobs, before one failed; "+
				"the run counts the gang's together)", g.backoff, g.replicas, int64(g.backoff)*int64(g.replicas))
		}
	}
	if g.ignoresDisruptions {
		c.run.Spec.FailurePolicy.Rules = append(c.run.Spec.FailurePolicy.Rules, v1alpha1.FailurePolicyRule{
			Name:     RuleIgnoreDisruptions,
			OnCauses: disruptionCauses,
			Action:   v1alpha1.ActionRestartRunIgnoreBudget,
		})
		c.differs(g.jobField+".podFailurePolicy", "ignores disrupted pods: the Job replaced such a pod alone, without counting it; "+
			"the run restarts the whole gang on a disruption (a preemption, an eviction, a node shutdown, a lost or tainted node), without spending budget (rule %s)", RuleIgnoreDisruptions)
	}
	c.restartOnAnyFailure(a)

	strategy := "Recreate"
	if g.jobSet != nil && g.jobSet.RestartStrategy != "" {
		strategy = g.jobSet.RestartStrategy
	}
	// The JobSet's own restarts (maxRestarts) are what its strategy is for: a Job's retries
	// replace a pod each, which differs from any gang restart (said above).
	restarts := g.maxRestarts > 0
	switch strategy {
	case "Recreate", "BlockingRecreate":
		if restarts || strategy == "BlockingRecreate" {
			c.run.Spec.FailurePolicy.RestartMode = v1alpha1.RestartModeRecreate
		}
		if restarts {
			c.note("spec.failurePolicy.restartStrategy", "%s: a restart recreates the gang's pods, as the JobSet recreated its Jobs (restartMode Recreate; "+
				"the next attempt starts once every pod of the last is gone). restartMode Auto would restart them in place where the nodes can: faster, "+
				"but the pods keep their emptyDir volumes", strategy)
		}
	case "InPlaceRestart":
		c.note("spec.failurePolicy.restartStrategy", "InPlaceRestart is restartMode Auto: in place where every node can (the kubelet's RestartAllContainers and faultline's node agent), recreated elsewhere")
	default:
		c.differs("spec.failurePolicy.restartStrategy", "%s is not a strategy this converter knows", strategy)
	}
}

// ignoresDisruptionsOnly reports whether a pod failure policy only ignores disrupted pods
// (JobSet's documented way not to count preemptions), which faultline does by itself.
func ignoresDisruptionsOnly(p *batchv1.PodFailurePolicy) bool {
	for _, r := range p.Rules {
		if r.Action != batchv1.PodFailurePolicyActionIgnore || r.OnExitCodes != nil || len(r.OnPodConditions) != 1 ||
			r.OnPodConditions[0].Type != corev1.DisruptionTarget {
			return false
		}
	}
	return true
}

func plural(n int32, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func ruleMatch(reasons, patterns []string) string {
	var parts []string
	if len(reasons) > 0 {
		parts = append(parts, "reasons "+strings.Join(reasons, ", "))
	}
	if len(patterns) > 0 {
		parts = append(parts, "messages "+strings.Join(patterns, ", "))
	}
	if len(parts) == 0 {
		return "any failure"
	}
	return strings.Join(parts, " and ")
}
