package convert

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// pyTorchJob holds the fields of a Kubeflow PyTorchJob (kubeflow.org/v1, training-operator
// pkg/apis/kubeflow.org/v1/pytorch_types.go and common_types.go) that a conversion reads.
type pyTorchJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		RunPolicy struct {
			CleanPodPolicy          *string        `json:"cleanPodPolicy,omitempty"`
			TTLSecondsAfterFinished *int32         `json:"ttlSecondsAfterFinished,omitempty"`
			ActiveDeadlineSeconds   *int64         `json:"activeDeadlineSeconds,omitempty"`
			BackoffLimit            *int32         `json:"backoffLimit,omitempty"`
			SchedulingPolicy        map[string]any `json:"schedulingPolicy,omitempty"`
			Suspend                 *bool          `json:"suspend,omitempty"`
			ManagedBy               *string        `json:"managedBy,omitempty"`
		} `json:"runPolicy"`
		ElasticPolicy *struct {
			MinReplicas  *int32           `json:"minReplicas,omitempty"`
			MaxReplicas  *int32           `json:"maxReplicas,omitempty"`
			RDZVBackend  *string          `json:"rdzvBackend,omitempty"`
			RDZVPort     *int32           `json:"rdzvPort,omitempty"`
			RDZVHost     *string          `json:"rdzvHost,omitempty"`
			RDZVID       *string          `json:"rdzvId,omitempty"`
			RDZVConf     []map[string]any `json:"rdzvConf,omitempty"`
			Standalone   *bool            `json:"standalone,omitempty"`
			NProcPerNode *int32           `json:"nProcPerNode,omitempty"`
			MaxRestarts  *int32           `json:"maxRestarts,omitempty"`
			Metrics      []map[string]any `json:"metrics,omitempty"`
		} `json:"elasticPolicy,omitempty"`
		PyTorchReplicaSpecs map[string]*struct {
			Replicas      *int32                 `json:"replicas,omitempty"`
			Template      corev1.PodTemplateSpec `json:"template,omitempty"`
			RestartPolicy string                 `json:"restartPolicy,omitempty"`
		} `json:"pytorchReplicaSpecs"`
		NprocPerNode *string `json:"nprocPerNode,omitempty"`
	} `json:"spec"`
	Status map[string]any `json:"status,omitempty"`
}

// The PyTorchJob's defaults (training-operator v1.9, pytorch_defaults.go and pytorch_types.go).
const (
	pyTorchJobPortName     = "pytorchjob-port"
	pyTorchJobDefaultPort  = 23456
	pyTorchJobRestart      = "OnFailure"
	pyTorchJobNprocPerNode = "auto"
	// pyTorchJobCleanPodPolicy is a PyTorchJob's runPolicy.cleanPodPolicy when it sets none
	// (SetDefaults_PyTorchJob): the operator deletes no pod when the job ends.
	pyTorchJobCleanPodPolicy = "None"
)

func fromPyTorchJob(obj *unstructured.Unstructured, o Options) (*Result, error) {
	if o.Framework != "" && o.Framework != frameworkPyTorch {
		return nil, fmt.Errorf("PyTorchJob %s: --framework %s: a PyTorchJob converts to framework %s", obj.GetName(), o.Framework, frameworkPyTorch)
	}
	c := &conversion{}
	pj := &pyTorchJob{}
	if err := c.decode(obj, pj); err != nil {
		return nil, err
	}
	spec := &pj.Spec
	// The operator accepts the replica types in any case ("master", "Master").
	byType := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(spec.PyTorchReplicaSpecs)) {
		switch strings.ToLower(k) {
		case "master", "worker":
			byType[strings.ToLower(k)] = k
		default:
			c.differs("spec.pytorchReplicaSpecs."+k, "replica type %s is not carried over: a PyTorchJob has a Master and Workers", k)
		}
	}
	master, worker := spec.PyTorchReplicaSpecs[byType["master"]], spec.PyTorchReplicaSpecs[byType["worker"]]
	if master == nil && worker == nil {
		return nil, fmt.Errorf("PyTorchJob %s: spec.pytorchReplicaSpecs has neither a Master nor a Worker: nothing to run", pj.Name)
	}
	c.newRun(&pj.ObjectMeta)

	// Index 0 is the master (rank 0), indexes 1.. the workers, as the operator ranks them.
	first, firstField := master, "spec.pytorchReplicaSpecs."+byType["master"]
	if master == nil {
		first, firstField = worker, "spec.pytorchReplicaSpecs."+byType["worker"]
	}
	var masters, workers int32
	if master != nil {
		masters = ptr.Deref(master.Replicas, 1)
		if masters != 1 {
			c.differs(firstField+".replicas", "%d masters: a PyTorchJob's Master is one pod (rank 0); the run counts them as workers", masters)
		}
	}
	if worker != nil {
		workers = ptr.Deref(worker.Replicas, 1)
	}
	c.run.Spec.Workers = masters + workers
	if master != nil && worker != nil && !equality.Semantic.DeepEqual(master.Template, worker.Template) {
		c.differs("spec.pytorchReplicaSpecs."+byType["worker"]+".template", "differs from the Master's: every index of the run runs the Master's template")
	}
	c.template(firstField+".template", first.Template)
	c.run.Spec.Framework = frameworkPyTorch
	tmpl := &c.run.Spec.Template.Spec

	// The rendezvous: the operator's master port (the container's pytorchjob-port, 23456 by
	// default), processes per pod, PYTHONUNBUFFERED.
	port := int32(pyTorchJobDefaultPort)
	for _, ct := range tmpl.Containers {
		for _, p := range ct.Ports {
			if p.Name == pyTorchJobPortName {
				port = p.ContainerPort
			}
		}
	}
	setOption(c.run, torchOptionPort, strconv.Itoa(int(port)))
	nproc := ptr.Deref(spec.NprocPerNode, pyTorchJobNprocPerNode)
	if ep := spec.ElasticPolicy; ep != nil && ep.NProcPerNode != nil {
		nproc = strconv.Itoa(int(*ep.NProcPerNode))
	}
	setOption(c.run, torchOptionNprocPerNode, nproc)
	addEnv(tmpl, "PYTHONUNBUFFERED", "1")
	c.note("spec", "MASTER_ADDR, MASTER_PORT (%d), WORLD_SIZE, RANK and torchrun's PET_ variables come from faultline's pytorch plugin, "+
		"with the same values as the operator's (nprocPerNode %s)", port, nproc)

	// The pods' names: <job>-master-0 and <job>-worker-<i>, the run's <run>-0 and <run>-<i+1>.
	pattern := regexp.MustCompile(`\b` + regexp.QuoteMeta(pj.Name) + `-(master|worker)-(\d+)\b`)
	c.rename(firstField+".template.spec.containers", pattern, func(m []string) (int, bool) {
		i, _ := strconv.Atoi(m[2])
		if m[1] == "master" {
			return i, master != nil && int32(i) < masters
		}
		return int(masters) + i, int32(i) < workers
	})
	c.fieldRefs(firstField+".template.spec", "training.kubeflow.org/", "FAULTLINE_INDEX is the pod's index (its rank), FAULTLINE_RUN the run")

	// Restarts.
	rp := first.RestartPolicy
	if rp == "" {
		rp = pyTorchJobRestart
	}
	if master != nil && worker != nil && worker.RestartPolicy != master.RestartPolicy {
		c.differs("spec.pytorchReplicaSpecs."+byType["worker"]+".restartPolicy", "%q differs from the Master's %q: the run has one policy, from the Master's", worker.RestartPolicy, master.RestartPolicy)
	}
	rpField := firstField + ".restartPolicy"
	bl := spec.RunPolicy.BackoffLimit
	switch rp {
	case "Never":
		c.restartOnAnyFailure(anyFailure{field: rpField, what: "restartPolicy Never"})
	case "ExitCode":
		limit := "without limit (no runPolicy.backoffLimit)"
		if bl != nil {
			limit = fmt.Sprintf("up to runPolicy.backoffLimit %d", *bl)
		}
		c.differs(rpField, "ExitCode restarts the failed pod alone when it exited 128-255 (a signal: a preemption's SIGTERM, an OOM kill, a segfault), %s, "+
			"and fails the job on 1-127; a TrainingRun does not match exit codes: it keeps faultline's defaults, restarting the whole gang on an infrastructure fault (up to 10) "+
			"or a failure without evidence (1) and failing at once on an application error (an OOM kill and a segfault among them)", limit)
	case "OnFailure", "Always":
		alone := "the failed container in its pod"
		if rp == "Always" {
			alone = "the container in its pod, even one that exited 0"
		}
		if bl != nil {
			c.restartOnAnyFailure(anyFailure{field: rpField, what: fmt.Sprintf("restartPolicy %s with runPolicy.backoffLimit %d", rp, *bl), n: *bl, alone: alone})
		} else {
			c.restartOnAnyFailure(anyFailure{field: rpField, what: fmt.Sprintf("restartPolicy %s without a runPolicy.backoffLimit", rp), unlimited: true, alone: alone})
		}
	default:
		c.differs(rpField, "%s is not a restart policy this converter knows", rp)
	}

	// Success: the operator's PyTorchJob succeeds when its Master does, else when every
	// Worker has (an elastic one when any has).
	if master != nil {
		c.run.Spec.SuccessPolicy = v1alpha1.SuccessPolicyLeader
		c.note(firstField, "the run succeeds when index 0, the Master, exits 0 (successPolicy Leader), as the PyTorchJob did")
	} else {
		c.run.Spec.SuccessPolicy = v1alpha1.SuccessPolicyAllWorkers
		if spec.ElasticPolicy != nil && workers > 1 {
			c.differs("spec.elasticPolicy", "an elastic PyTorchJob without a Master succeeds when any Worker does; the run succeeds when every worker does (successPolicy AllWorkers)")
		}
	}

	// Elastic training: a fixed gang here.
	if ep := spec.ElasticPolicy; ep != nil {
		if (ep.MinReplicas != nil && *ep.MinReplicas != c.run.Spec.Workers) || (ep.MaxReplicas != nil && *ep.MaxReplicas != c.run.Spec.Workers) {
			c.differs("spec.elasticPolicy", "minReplicas %s, maxReplicas %s: a run is a gang of exactly %d pods; a lost pod restarts the gang rather than shrinking it",
				fmtInt32(ep.MinReplicas), fmtInt32(ep.MaxReplicas), c.run.Spec.Workers)
		}
		switch b := ptr.Deref(ep.RDZVBackend, ""); b {
		case "", torchRendezvousC10d:
			if b != "" {
				setOption(c.run, torchOptionRendezvous, torchRendezvousC10d)
			}
		default:
			c.differs("spec.elasticPolicy.rdzvBackend", "%s is not carried over: the pytorch plugin's rendezvous is static or c10d (hosted by pod 0)", b)
		}
		if ep.RDZVPort != nil || ep.RDZVHost != nil || ep.RDZVID != nil || ep.Standalone != nil {
			c.note("spec.elasticPolicy", "the rendezvous endpoint and id are the plugin's: pod 0's address and the run's name")
		}
		if len(ep.RDZVConf) > 0 {
			c.differs("spec.elasticPolicy.rdzvConf", "not carried over: torchrun's rendezvous settings (its timeouts among them) are the plugin's defaults")
		}
		if ep.MaxRestarts != nil && *ep.MaxRestarts > 0 {
			c.differs("spec.elasticPolicy.maxRestarts", "torchrun restarted its workers in their pods up to %d times after a failure; the run's torchrun does not (its restarts are 0): "+
				"faultline restarts the whole gang on a fresh attempt, as spec.failurePolicy says", *ep.MaxRestarts)
		}
		if len(ep.Metrics) > 0 {
			c.differs("spec.elasticPolicy.metrics", "not carried over: a run does not scale")
		}
	}

	rpol := &spec.RunPolicy
	if rpol.ActiveDeadlineSeconds != nil {
		c.differs("spec.runPolicy.activeDeadlineSeconds", "not carried over: a TrainingRun has no deadline")
	}
	if len(rpol.SchedulingPolicy) > 0 {
		c.differs("spec.runPolicy.schedulingPolicy", "not carried over: faultline gangs through Kueue (the label %s), not Volcano or scheduler-plugins", "kueue.x-k8s.io/queue-name")
	}
	switch cp := rpol.CleanPodPolicy; {
	case cp == nil:
		c.differs("spec.runPolicy.cleanPodPolicy", "unset, %s: the operator left running the pods that still ran when the job ended; "+
			"a run stops every worker when it ends", pyTorchJobCleanPodPolicy)
	case *cp == "Running" || *cp == "All":
		c.note("spec.runPolicy.cleanPodPolicy", "%s: a run stops its running workers when it ends, as the operator deleted them; its finished pods, which hold no resources, "+
			"stay until the run is deleted (or its ttlSecondsAfterFinished)", *cp)
	default:
		c.differs("spec.runPolicy.cleanPodPolicy", "%s: the operator left running the pods that still ran when the job ended; a run stops every worker when it ends", *cp)
	}
	if rpol.ManagedBy != nil && *rpol.ManagedBy != "kubeflow.org/training-operator" {
		c.differs("spec.runPolicy.managedBy", "%s managed the job; faultline's controller runs the run", *rpol.ManagedBy)
	}
	c.run.Spec.Suspend = rpol.Suspend
	c.run.Spec.TTLSecondsAfterFinished = rpol.TTLSecondsAfterFinished
	return c.result(PyTorchJob, &pj.ObjectMeta), nil
}

func fmtInt32(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}
