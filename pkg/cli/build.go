package cli

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// RunSpec is a TrainingRun as `launcher run` takes it from flags. Nil pointers and empty
// strings leave the field to the CRD's defaults.
type RunSpec struct {
	Name, Namespace string
	Framework       string
	Workers         int32
	Image           string
	// Command is the worker's command and arguments (after --); empty keeps the image's.
	Command          []string
	GPUsPerWorker    int64
	CPU, Memory      string
	Env              []string // KEY=VALUE
	FrameworkOptions []string // key=value
	Labels           []string // key=value, on the run
	RestartScope     string
	SuccessPolicy    string
	MaxInfra         *int32
	MaxApp           *int32
	MaxUnknown       *int32
	SettleSeconds    *int32
	// ExcludeFaultyNodes adds a rule that keeps later attempts off the node of any
	// infrastructure fault (the defaults do it only for GPU faults).
	ExcludeFaultyNodes bool
	Suspend            bool
	TTLSeconds         *int32
	// Queue is the Kueue LocalQueue that admits the run (its kueue.x-k8s.io/queue-name
	// label): the run starts nothing until Kueue admits it.
	Queue string
}

// RuleExcludeFaultyNodes names the rule that --exclude-faulty-nodes adds.
const RuleExcludeFaultyNodes = "exclude-faulty-nodes"

// TrainingRun builds the run. It checks what the flags alone can tell; the API server
// checks the rest.
func (s RunSpec) TrainingRun() (*v1alpha1.TrainingRun, error) {
	if s.Name == "" {
		return nil, UsageError("--name is required")
	}
	if s.Image == "" {
		return nil, UsageError("--image is required: the container image of the workers")
	}
	env, err := pairs("--env", s.Env)
	if err != nil {
		return nil, err
	}
	opts, err := pairs("--framework-option", s.FrameworkOptions)
	if err != nil {
		return nil, err
	}
	labels, err := pairs("--label", s.Labels)
	if err != nil {
		return nil, err
	}
	c := corev1.Container{Name: "worker", Image: s.Image}
	if len(s.Command) > 0 {
		c.Command = append([]string(nil), s.Command...)
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: env[k]})
	}
	limits, requests := corev1.ResourceList{}, corev1.ResourceList{}
	if s.GPUsPerWorker > 0 {
		limits[corev1.ResourceName(v1alpha1.ResourceGPU)] = *resource.NewQuantity(s.GPUsPerWorker, resource.DecimalSI)
	}
	for _, r := range []struct {
		name  corev1.ResourceName
		value string
		flag  string
	}{{corev1.ResourceCPU, s.CPU, "--cpu"}, {corev1.ResourceMemory, s.Memory, "--memory"}} {
		if r.value == "" {
			continue
		}
		q, err := resource.ParseQuantity(r.value)
		if err != nil {
			return nil, UsageError("%s %q: %v", r.flag, r.value, err)
		}
		requests[r.name] = q
		if r.name == corev1.ResourceMemory {
			limits[r.name] = q
		}
	}
	if len(limits) > 0 {
		c.Resources.Limits = limits
	}
	if len(requests) > 0 {
		c.Resources.Requests = requests
	}
	run := &v1alpha1.TrainingRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindTrainingRun},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace},
		Spec: v1alpha1.TrainingRunSpec{
			Framework:     s.Framework,
			Workers:       s.Workers,
			RestartScope:  v1alpha1.RestartScope(s.RestartScope),
			SuccessPolicy: v1alpha1.SuccessPolicy(s.SuccessPolicy),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{c},
			}},
			FailurePolicy: v1alpha1.FailurePolicy{
				MaxRestarts:   v1alpha1.RestartBudgets{Infrastructure: s.MaxInfra, Application: s.MaxApp, Unknown: s.MaxUnknown},
				SettleSeconds: s.SettleSeconds,
			},
			TTLSecondsAfterFinished: s.TTLSeconds,
		},
	}
	if len(opts) > 0 {
		run.Spec.FrameworkOptions = opts
	}
	if s.Queue != "" {
		if l, ok := labels[v1alpha1.LabelQueueName]; ok && l != s.Queue {
			return nil, UsageError("--queue %s and --label %s=%s name two queues", s.Queue, v1alpha1.LabelQueueName, l)
		}
		if labels == nil {
			labels = map[string]string{}
		}
		labels[v1alpha1.LabelQueueName] = s.Queue
	}
	if len(labels) > 0 {
		run.Labels = labels
	}
	if s.Suspend {
		run.Spec.Suspend = ptr.To(true)
	}
	if s.ExcludeFaultyNodes {
		run.Spec.FailurePolicy.Rules = []v1alpha1.FailurePolicyRule{{
			Name:      RuleExcludeFaultyNodes,
			OnClasses: []v1alpha1.Class{v1alpha1.ClassInfrastructure},
			Action:    v1alpha1.ActionRestartRun, ExcludeNode: true,
		}}
	}
	return run, nil
}

func pairs(flag string, kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, UsageError("%s %q: want KEY=VALUE", flag, kv)
		}
		out[k] = v
	}
	return out, nil
}

// created is kubectl's line for a created object.
func created(run *v1alpha1.TrainingRun) string {
	return fmt.Sprintf("trainingrun.%s/%s created", v1alpha1.GroupName, run.Name)
}
