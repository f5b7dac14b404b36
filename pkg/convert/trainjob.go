package convert

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// trainJob holds the fields of a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1,
// kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go) that a conversion reads:
// v2.2's runtimePatches, and v2.0 and v2.1's podTemplateOverrides, labels and annotations.
type trainJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		RuntimeRef struct {
			Name     string  `json:"name,omitempty"`
			APIGroup *string `json:"apiGroup,omitempty"`
			Kind     *string `json:"kind,omitempty"`
		} `json:"runtimeRef"`
		Initializer map[string]any `json:"initializer,omitempty"`
		Trainer     *struct {
			Image            *string                      `json:"image,omitempty"`
			Command          []string                     `json:"command,omitempty"`
			Args             []string                     `json:"args,omitempty"`
			Env              []corev1.EnvVar              `json:"env,omitempty"`
			NumNodes         *int32                       `json:"numNodes,omitempty"`
			ResourcesPerNode *corev1.ResourceRequirements `json:"resourcesPerNode,omitempty"`
			NumProcPerNode   *intOrString                 `json:"numProcPerNode,omitempty"`
		} `json:"trainer,omitempty"`
		RuntimePatches []struct {
			Manager             string       `json:"manager,omitempty"`
			Time                *metav1.Time `json:"time,omitempty"`
			TrainingRuntimeSpec *struct {
				Template *struct {
					Metadata *metav1.ObjectMeta `json:"metadata,omitempty"`
					Spec     *struct {
						ReplicatedJobs []struct {
							Name     string `json:"name,omitempty"`
							Template *struct {
								Metadata *metav1.ObjectMeta `json:"metadata,omitempty"`
								Spec     *struct {
									Template *struct {
										Metadata *metav1.ObjectMeta `json:"metadata,omitempty"`
										Spec     *podSpecPatch      `json:"spec,omitempty"`
									} `json:"template,omitempty"`
								} `json:"spec,omitempty"`
							} `json:"template,omitempty"`
						} `json:"replicatedJobs,omitempty"`
					} `json:"spec,omitempty"`
				} `json:"template,omitempty"`
			} `json:"trainingRuntimeSpec,omitempty"`
		} `json:"runtimePatches,omitempty"`
		PodTemplateOverrides []struct {
			TargetJobs []struct {
				Name string `json:"name"`
			} `json:"targetJobs"`
			Metadata *metav1.ObjectMeta `json:"metadata,omitempty"`
			Spec     *podSpecPatch      `json:"spec,omitempty"`
		} `json:"podTemplateOverrides,omitempty"`
		Labels                map[string]string `json:"labels,omitempty"`
		Annotations           map[string]string `json:"annotations,omitempty"`
		Suspend               *bool             `json:"suspend,omitempty"`
		ActiveDeadlineSeconds *int64            `json:"activeDeadlineSeconds,omitempty"`
		ManagedBy             *string           `json:"managedBy,omitempty"`
	} `json:"spec"`
	Status map[string]any `json:"status,omitempty"`
}

// intOrString reads numProcPerNode, an integer in v2.2 and "auto", "cpu", "gpu" or an
// integer before.
type intOrString struct{ s string }

func (v *intOrString) UnmarshalJSON(b []byte) error {
	if s, err := strconv.Unquote(string(b)); err == nil {
		v.s = s
		return nil
	}
	v.s = string(b)
	return nil
}

// podSpecPatch is what a TrainJob may change in the pods of a runtime's job.
type podSpecPatch struct {
	ServiceAccountName *string                       `json:"serviceAccountName,omitempty"`
	Volumes            []corev1.Volume               `json:"volumes,omitempty"`
	InitContainers     []containerPatch              `json:"initContainers,omitempty"`
	Containers         []containerPatch              `json:"containers,omitempty"`
	ImagePullSecrets   []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	SecurityContext    *corev1.PodSecurityContext    `json:"securityContext,omitempty"`
	NodeSelector       map[string]string             `json:"nodeSelector,omitempty"`
	Affinity           *corev1.Affinity              `json:"affinity,omitempty"`
	Tolerations        []corev1.Toleration           `json:"tolerations,omitempty"`
	SchedulingGates    []corev1.PodSchedulingGate    `json:"schedulingGates,omitempty"`
}

type containerPatch struct {
	Name            string                  `json:"name,omitempty"`
	Env             []corev1.EnvVar         `json:"env,omitempty"`
	VolumeMounts    []corev1.VolumeMount    `json:"volumeMounts,omitempty"`
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`
}

// trainerRuntime is what a conversion knows of one of Kubeflow Trainer's built-in
// ClusterTrainingRuntimes (manifests/base/runtimes, v2.2.1): the framework whose rendezvous
// it sets and its trainer container. A TrainJob names the runtime; it is not read from the
// cluster (convert is offline), so other runtimes need the TrainJob's own image.
type trainerRuntime struct {
	framework string
	image     string
}

var trainerRuntimes = map[string]trainerRuntime{
	"torch-distributed": {frameworkPyTorch, "pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime"},
	"jax-distributed":   {frameworkJAX, "nvcr.io/nvidia/jax:25.10-py3"},
}

// unsupportedRuntimes launch their processes in ways a faultline plugin does not (MPI,
// Flux, a data cache beside the trainers, torchtune's recipes with initializers).
var unsupportedRuntimes = map[string]string{
	"deepspeed-distributed":        "an MPI launcher and workers",
	"mlx-distributed":              "an MPI launcher and workers",
	"xgboost-distributed":          "XGBoost's own tracker",
	"torch-distributed-with-cache": "a data cache beside the trainers",
	"torchtune-llama3.2-1b":        "torchtune's recipe with model and dataset initializers",
	"torchtune-llama3.2-3b":        "torchtune's recipe with model and dataset initializers",
	"torchtune-qwen2.5-1.5b":       "torchtune's recipe with model and dataset initializers",
	"flux-distributed":             "the Flux framework's own launcher",
}

// trainerNode is the name of the trainer's job and container in a Trainer runtime.
const trainerNode = "node"

func fromTrainJob(obj *unstructured.Unstructured, o Options) (*Result, error) {
	c := &conversion{}
	tj := &trainJob{}
	if err := c.decode(obj, tj); err != nil {
		return nil, err
	}
	spec := &tj.Spec
	rt, known := trainerRuntimes[spec.RuntimeRef.Name]
	if kind := ptr.Deref(spec.RuntimeRef.Kind, "ClusterTrainingRuntime"); kind != "ClusterTrainingRuntime" {
		known = false
		c.differs("spec.runtimeRef", "a %s of the namespace: its template is not read (convert works offline); only the TrainJob's own fields are carried over", kind)
	} else if why, ok := unsupportedRuntimes[spec.RuntimeRef.Name]; ok {
		c.differs("spec.runtimeRef.name", "runtime %s runs %s, which a faultline run does not: only its trainer's image and command are carried over", spec.RuntimeRef.Name, why)
	} else if !known {
		c.differs("spec.runtimeRef.name", "runtime %s is not one of Kubeflow Trainer's built-in runtimes this converter knows (torch-distributed, jax-distributed): "+
			"its template (volumes, init containers, policies) is not read; only the TrainJob's own fields are carried over", spec.RuntimeRef.Name)
	}
	tr := spec.Trainer
	if tr == nil {
		tr = &struct {
			Image            *string                      `json:"image,omitempty"`
			Command          []string                     `json:"command,omitempty"`
			Args             []string                     `json:"args,omitempty"`
			Env              []corev1.EnvVar              `json:"env,omitempty"`
			NumNodes         *int32                       `json:"numNodes,omitempty"`
			ResourcesPerNode *corev1.ResourceRequirements `json:"resourcesPerNode,omitempty"`
			NumProcPerNode   *intOrString                 `json:"numProcPerNode,omitempty"`
		}{}
	}
	image := ptr.Deref(tr.Image, rt.image)
	if image == "" {
		return nil, fmt.Errorf("TrainJob %s: runtime %s is not one this converter knows and spec.trainer.image is unset: "+
			"the image is the runtime's; set spec.trainer.image", tj.Name, spec.RuntimeRef.Name)
	}
	c.newRun(&tj.ObjectMeta)
	c.run.Spec.Workers = ptr.Deref(tr.NumNodes, 1)
	ct := corev1.Container{Name: trainerNode, Image: image, Command: tr.Command, Args: tr.Args, Env: tr.Env}
	if tr.ResourcesPerNode != nil {
		ct.Resources = *tr.ResourcesPerNode
	}
	if tr.Image == nil {
		c.note("spec.trainer.image", "unset: runtime %s's image %s (Kubeflow Trainer v2.2.1's)", spec.RuntimeRef.Name, image)
	}
	c.template("spec.trainer", corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{ct}}})
	tmpl := &c.run.Spec.Template.Spec

	// The runtime's rendezvous is faultline's plugin's: the same variables.
	if o.Framework != "" && known && o.Framework != rt.framework {
		return nil, fmt.Errorf("TrainJob %s: --framework %s: runtime %s is %s", tj.Name, o.Framework, spec.RuntimeRef.Name, rt.framework)
	}
	c.framework(o, rt.framework)
	switch c.run.Spec.Framework {
	case frameworkPyTorch:
		// Trainer's torch plugin: numProcPerNode, else "auto", which without GPUs it takes as
		// the CPUs per node; faultline's plugin would start one process per pod there.
		switch {
		case tr.NumProcPerNode != nil:
			setOption(c.run, torchOptionNprocPerNode, tr.NumProcPerNode.s)
		case gpus(ct.Resources) == 0:
			setOption(c.run, torchOptionNprocPerNode, strconv.Itoa(max(1, cpus(ct.Resources))))
		}
		c.note("spec.trainer", "torchrun's PET_ variables come from faultline's pytorch plugin, with Trainer's values (master port 29500)")
	case frameworkJAX:
		c.note("spec.trainer", "JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID come from faultline's jax plugin, as from Trainer's")
		if tr.NumProcPerNode != nil && tr.NumProcPerNode.s != "1" {
			c.differs("spec.trainer.numProcPerNode", "%s: faultline's jax plugin runs one JAX process per pod", tr.NumProcPerNode.s)
		}
	}

	// The patches of the trainer's pods; those of other jobs (the initializers) have nothing
	// to apply to.
	for i, p := range spec.RuntimePatches {
		field := fmt.Sprintf("spec.runtimePatches[%d]", i)
		if p.TrainingRuntimeSpec == nil || p.TrainingRuntimeSpec.Template == nil {
			continue
		}
		t := p.TrainingRuntimeSpec.Template
		if t.Metadata != nil {
			c.controllerKeys(field+".trainingRuntimeSpec.template.metadata.labels", jobSetPrefix, "the JobSet's controller", t.Metadata.Labels)
			c.controllerKeys(field+".trainingRuntimeSpec.template.metadata.annotations", jobSetPrefix, "the JobSet's controller", t.Metadata.Annotations)
			if len(t.Metadata.Labels) > 0 || len(t.Metadata.Annotations) > 0 {
				c.note(field+".trainingRuntimeSpec.template.metadata", "the JobSet's labels and annotations have no object to go on: faultline makes no JobSet")
			}
		}
		if t.Spec == nil {
			continue
		}
		for j, rj := range t.Spec.ReplicatedJobs {
			rjField := fmt.Sprintf("%s.trainingRuntimeSpec.template.spec.replicatedJobs[%d]", field, j)
			if rj.Name != trainerNode {
				c.differs(rjField, "patches job %s, which the run does not have: not carried over", rj.Name)
				continue
			}
			if rj.Template == nil {
				continue
			}
			if m := rj.Template.Metadata; m != nil {
				c.controllerKeys(rjField+".template.metadata.labels", jobSetPrefix, "the JobSet's controller", m.Labels)
				c.controllerKeys(rjField+".template.metadata.annotations", jobSetPrefix, "the JobSet's controller", m.Annotations)
				if len(m.Labels) > 0 || len(m.Annotations) > 0 {
					c.note(rjField+".template.metadata", "the Job's labels and annotations are not carried over (the pods' are): faultline labels each attempt's Job itself")
				}
			}
			if rj.Template.Spec == nil || rj.Template.Spec.Template == nil {
				continue
			}
			pt := rj.Template.Spec.Template
			c.patchPods(rjField+".template.spec.template", pt.Metadata, pt.Spec)
		}
	}
	for i, p := range spec.PodTemplateOverrides {
		field := fmt.Sprintf("spec.podTemplateOverrides[%d]", i)
		for _, t := range p.TargetJobs {
			if t.Name != trainerNode {
				c.differs(field+".targetJobs", "overrides job %s, which the run does not have: not carried over", t.Name)
				continue
			}
			c.patchPods(field, p.Metadata, p.Spec)
		}
	}
	c.controllerKeys("spec.labels", jobSetPrefix, "the JobSet's controller", spec.Labels)
	c.controllerKeys("spec.annotations", jobSetPrefix, "the JobSet's controller", spec.Annotations)
	if len(spec.Labels) > 0 || len(spec.Annotations) > 0 {
		c.note("spec.labels", "the labels and annotations of Trainer's JobSet have no object to go on: faultline makes no JobSet")
	}
	if len(spec.Initializer) > 0 {
		c.differs("spec.initializer", "not carried over: a run has no dataset or model initializer; download in an init container of the template "+
			"(into a volume the worker mounts), or before the run")
	}
	if spec.ActiveDeadlineSeconds != nil {
		c.differs("spec.activeDeadlineSeconds", "not carried over: a TrainingRun has no deadline")
	}
	if spec.ManagedBy != nil && *spec.ManagedBy != "trainer.kubeflow.org/trainjob-controller" {
		c.differs("spec.managedBy", "%s managed the TrainJob (MultiKueue?); faultline's controller runs the run", *spec.ManagedBy)
	}
	c.run.Spec.Suspend = spec.Suspend
	// The built-in runtimes' JobSets have no failure policy and their Job no backoffLimit
	// nor restartPolicy: the Job API's 6 retries, each a restart of the failed container in
	// its pod (JobSet defaults a pod's restartPolicy to OnFailure), then the TrainJob fails.
	c.restartOnAnyFailure(anyFailure{
		field: "spec.runtimeRef",
		what:  fmt.Sprintf("the runtime's JobSet (no failurePolicy; its Job's backoffLimit unset, %d)", jobBackoffLimit),
		n:     jobBackoffLimit,
		alone: "the failed container in its pod (JobSet's default restartPolicy OnFailure)",
	})
	if c.run.Spec.Framework == frameworkJAX && tmpl.ServiceAccountName != "" {
		c.note("serviceAccountName", "%s is kept: for a bare jax.distributed.initialize() it needs to list the namespace's pods and get the run's Job (docs/plugins.md)", tmpl.ServiceAccountName)
	}
	return c.result(TrainJobKind, &tj.ObjectMeta), nil
}

// patchPods applies a TrainJob's patch of the trainer's pods to the run's template.
func (c *conversion) patchPods(field string, meta *metav1.ObjectMeta, p *podSpecPatch) {
	tmpl := &c.run.Spec.Template
	if meta != nil {
		tmpl.Labels = merge(tmpl.Labels, meta.Labels)
		tmpl.Annotations = merge(tmpl.Annotations, meta.Annotations)
	}
	if p == nil {
		return
	}
	s := &tmpl.Spec
	if p.ServiceAccountName != nil {
		s.ServiceAccountName = *p.ServiceAccountName
	}
	s.Volumes = append(s.Volumes, p.Volumes...)
	s.ImagePullSecrets = append(s.ImagePullSecrets, p.ImagePullSecrets...)
	if p.SecurityContext != nil {
		s.SecurityContext = p.SecurityContext
	}
	s.NodeSelector = merge(s.NodeSelector, p.NodeSelector)
	if p.Affinity != nil {
		s.Affinity = p.Affinity
	}
	s.Tolerations = append(s.Tolerations, p.Tolerations...)
	s.SchedulingGates = append(s.SchedulingGates, p.SchedulingGates...)
	for _, cp := range p.Containers {
		found := false
		for i := range s.Containers {
			if s.Containers[i].Name != cp.Name {
				continue
			}
			found = true
			ct := &s.Containers[i]
			ct.Env = append(ct.Env, cp.Env...)
			ct.VolumeMounts = append(ct.VolumeMounts, cp.VolumeMounts...)
			if cp.SecurityContext != nil {
				ct.SecurityContext = cp.SecurityContext
			}
		}
		if !found {
			c.differs(field+".spec.containers["+cp.Name+"]", "patches container %s of the runtime's template, which convert does not read: not carried over", cp.Name)
		}
	}
	for _, cp := range p.InitContainers {
		c.differs(field+".spec.initContainers["+cp.Name+"]", "patches init container %s of the runtime's template, which convert does not read: not carried over", cp.Name)
	}
}

func merge(into, from map[string]string) map[string]string {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = map[string]string{}
	}
	for k, v := range from {
		into[k] = v
	}
	return into
}

func gpus(r corev1.ResourceRequirements) int64 {
	q, ok := r.Limits[v1alpha1.ResourceGPU]
	if !ok {
		q = r.Requests[v1alpha1.ResourceGPU]
	}
	return q.Value()
}

func cpus(r corev1.ResourceRequirements) int {
	q, ok := r.Limits[corev1.ResourceCPU]
	if !ok {
		q = r.Requests[corev1.ResourceCPU]
	}
	return int(q.Value())
}
