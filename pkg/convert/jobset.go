package convert

import (
	"fmt"
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
		FailurePolicy *struct {
			MaxRestarts     int32  `json:"maxRestarts,omitempty"`
			RestartStrategy string `json:"restartStrategy,omitempty"`
			Rules           []struct {
				Name                        string   `json:"name"`
				Action                      string   `json:"action"`
				OnJobFailureReasons         []string `json:"onJobFailureReasons,omitempty"`
				OnJobFailureMessagePatterns []string `json:"onJobFailureMessagePatterns,omitempty"`
				TargetReplicatedJobs        []string `json:"targetReplicatedJobs,omitempty"`
			} `json:"rules,omitempty"`
		} `json:"failurePolicy,omitempty"`
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

// jobSetPrefix is the prefix of the labels and annotations JobSet puts on its pods.
const jobSetPrefix = "jobset.sigs.k8s.io/"

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
	if job.BackoffLimitPerIndex != nil {
		c.run.Spec.RestartScope = v1alpha1.RestartScopeIndex
		c.run.Spec.BackoffLimitPerIndex = job.BackoffLimitPerIndex
		c.run.Spec.MaxFailedIndexes = job.MaxFailedIndexes
		c.note(jobField+".backoffLimitPerIndex", "the run's restartScope is Index: each index is retried on its own, %d times", *job.BackoffLimitPerIndex)
	}
	if pfp := job.PodFailurePolicy; pfp != nil && len(pfp.Rules) > 0 {
		if ignoresDisruptionsOnly(pfp) {
			c.note(jobField+".podFailurePolicy", "not needed: faultline judges a disrupted pod (preemption, eviction, a node shutdown) an infrastructure fault, not the program's")
		} else {
			c.differs(jobField+".podFailurePolicy", "not carried over: faultline writes each attempt's podFailurePolicy from its own verdicts; "+
				"express the rules as spec.failurePolicy.rules on causes and classes (docs/migration.md, \"Failure policies\")")
		}
	}
	if job.ActiveDeadlineSeconds != nil {
		c.differs(jobField+".activeDeadlineSeconds", "not carried over: a TrainingRun has no deadline; the run runs until its workers end")
	}
	if job.SuccessPolicy != nil {
		c.differs(jobField+".successPolicy", "not carried over: the run succeeds when every worker does (successPolicy AllWorkers) or index 0 does (Leader)")
	}
	if job.PodReplacementPolicy != nil || job.TTLSecondsAfterFinished != nil || job.Suspend != nil || job.ManagedBy != nil {
		c.note(jobField, "podReplacementPolicy, ttlSecondsAfterFinished, suspend and managedBy of the Job are faultline's to set on each attempt's Job")
	}
	if len(rj.Template.Labels) > 0 || len(rj.Template.Annotations) > 0 {
		c.note(rjField+".template.metadata", "the Job's labels and annotations are not carried over (the pods' are): faultline labels each attempt's Job itself")
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
		if n.PublishNotReadyAddresses != nil {
			c.note("spec.network.publishNotReadyAddresses", "faultline's Service publishes every worker's address as soon as it has one")
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
		switch fp.RestartStrategy {
		case "", "Recreate":
			c.note("spec.failurePolicy.restartStrategy", "a gang restart starts the next attempt only once every pod of the last is gone (one process per index), "+
				"in place where the nodes can (restartMode Auto)")
		case "BlockingRecreate":
			c.run.Spec.FailurePolicy.RestartMode = v1alpha1.RestartModeRecreate
		case "InPlaceRestart":
			c.note("spec.failurePolicy.restartStrategy", "InPlaceRestart is restartMode Auto: in place where every node can (the kubelet's RestartAllContainers and faultline's node agent), recreated elsewhere")
		default:
			c.differs("spec.failurePolicy.restartStrategy", "%s is not a strategy this converter knows", fp.RestartStrategy)
		}
	}
	// Each Job retries its pods backoffLimit times before it fails, and the JobSet restarts
	// maxRestarts times after a Job failed: a failure is retried up to (m+1)(b+1)-1 times.
	n := (maxRestarts+1)*(backoff+1) - 1
	if c.run.Spec.RestartScope != v1alpha1.RestartScopeIndex {
		c.restartOnAnyFailure("spec.failurePolicy", n, fmt.Sprintf("the JobSet (maxRestarts %d, each Job's backoffLimit %d)", maxRestarts, backoff))
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
	if spec.ManagedBy != nil {
		c.differs("spec.managedBy", "%s managed the JobSet; faultline's controller runs the run (MultiKueue does not dispatch TrainingRuns)", *spec.ManagedBy)
	}
	if len(spec.VolumeClaimPolicies) > 0 {
		c.differs("spec.volumeClaimPolicies", "not carried over: create the PersistentVolumeClaims yourself and name them in the template's volumes")
	}
	return c.result(JobSetKind, &js.ObjectMeta), nil
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
