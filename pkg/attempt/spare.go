package attempt

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/envexpand"
)

// A warm spare (spec.spares) is a pod of the run's Job made without an index: scheduled,
// started, and waiting at the barrier that supervises its worker container, whose worker
// it never starts before the controller hands it an index (HandOver) and the node agent
// opens it with that index (HandedIndex). Everything that reads a worker's index reads
// the completion-index label and annotation (Index), which the hand-over writes: from then
// on the spare is that index's pod, made for the attempt it joins, as a new pod would be.
// Its address is not its hostname (a pod's hostname cannot change): the controller
// publishes the index's name for it (rendezvous.SpareEndpoints).

// Spare reports whether pod is a warm spare that holds no index yet.
func Spare(pod metav1.Object) bool {
	_, ok := Index(pod)
	return MadeAsSpare(pod) && !ok
}

// MadeAsSpare reports whether pod was made as a warm spare, whether or not it holds an
// index now.
func MadeAsSpare(pod metav1.Object) bool {
	_, ok := pod.GetLabels()[v1alpha1.LabelSpare]
	return ok
}

// HandedIndex is the index the node agent names in the open of pod's barrier: a pod made as
// a spare, whose environment was made without one, learns it from the open; NoIndex for a
// pod made with its index (and a spare that holds none, which is never opened).
func HandedIndex(pod metav1.Object) int {
	if i, ok := Index(pod); ok && MadeAsSpare(pod) {
		return i
	}
	return NoIndex
}

// ErrSpareNeedsSupervisingBarrier: a spare's worker takes its index from the barrier that
// starts it, so only a pod whose barrier is its worker container's entrypoint can be one.
var ErrSpareNeedsSupervisingBarrier = errors.New("a warm spare needs the barrier in its worker container (one container with a command, on nodes that mount image volumes)")

// SparePodName is the name of slot's spare of job made during attempt n: a slot whose spare
// took an index gets a new one in a later attempt, under a new name, and a creation made
// twice within an attempt is refused by the API server rather than doubled.
func SparePodName(job *batchv1.Job, slot int, n int32) string {
	uid := strings.ReplaceAll(string(job.UID), "-", "")
	return fmt.Sprintf("%s-spare%d-%s-%d", job.Name, slot, uid[:min(len(uid), podNameUIDChars)], n)
}

// SparePod is slot's warm spare of job, made during attempt o.Attempt: the pod Pod makes,
// without an index (neither the completion-index label and annotation nor a hostname of
// its own), labelled LabelSpare with its slot. In its worker container, whose entrypoint
// the barrier is, the variables that depend on the index are given unexpanded
// (EnvIndexTemplates) and the command and args escaped ($ as $$), so that the kubelet
// leaves them for the barrier to expand once the open hands it an index
// (barrier.Identity).
func SparePod(job *batchv1.Job, slot int, o PodOptions) (*corev1.Pod, error) {
	pod, err := Pod(job, 0, o)
	if err != nil {
		return nil, err
	}
	name, place := BarrierContainer(&pod.Spec)
	if place != BarrierInWorker {
		return nil, ErrSpareNeedsSupervisingBarrier
	}
	pod.Name = SparePodName(job, slot, o.Attempt)
	delete(pod.Labels, batchv1.JobCompletionIndexAnnotation)
	delete(pod.Annotations, batchv1.JobCompletionIndexAnnotation)
	pod.Labels[v1alpha1.LabelSpare] = strconv.Itoa(slot)
	pod.Spec.Hostname = ""
	c := &pod.Spec.Containers[slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })]
	raw, err := json.Marshal(IndexTemplates(c.Env))
	if err != nil {
		return nil, err
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: v1alpha1.EnvIndexTemplates, Value: escape(string(raw))})
	// The barrier's own words, up to "--", are its; what follows is the worker's.
	if k := slices.Index(c.Command, "--"); k >= 0 {
		for j := k + 1; j < len(c.Command); j++ {
			c.Command[j] = escape(c.Command[j])
		}
	}
	for j := range c.Args {
		c.Args[j] = escape(c.Args[j])
	}
	return pod, nil
}

// escape makes s come out of the kubelet's expansion as it is ($$ is an escaped $).
func escape(s string) string { return strings.ReplaceAll(s, "$", "$$") }

// IndexTemplate is a variable of a worker container that depends on the worker's index, with
// its value as the container's spec has it.
type IndexTemplate struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// IndexTemplates are the variables of env that depend on the worker's index, in env's order:
// a downward-API reference to the completion index (its value then the index,
// $(JOB_COMPLETION_INDEX)), or a value that refers to such a variable before it. The index's
// own variables (FAULTLINE_INDEX, JOB_COMPLETION_INDEX) are the barrier's to set.
func IndexTemplates(env []corev1.EnvVar) []IndexTemplate {
	dependent := map[string]bool{v1alpha1.EnvIndex: true, v1alpha1.EnvCompletionIndex: true}
	var out []IndexTemplate
	for _, e := range env {
		var value string
		switch {
		case e.Name == v1alpha1.EnvIndex || e.Name == v1alpha1.EnvCompletionIndex:
			continue
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && indexField(e.ValueFrom.FieldRef.FieldPath):
			value = "$(" + v1alpha1.EnvCompletionIndex + ")"
		case e.ValueFrom == nil && slices.ContainsFunc(envexpand.References(e.Value), func(n string) bool { return dependent[n] }):
			value = e.Value
		default:
			// A later definition of a name replaces an earlier one, the kubelet's value then
			// the barrier's too.
			delete(dependent, e.Name)
			out = slices.DeleteFunc(out, func(t IndexTemplate) bool { return t.Name == e.Name })
			continue
		}
		dependent[e.Name] = true
		out = append(out, IndexTemplate{Name: e.Name, Value: value})
	}
	return out
}

// indexField reports whether a downward-API field path is the completion index.
func indexField(path string) bool {
	return path == "metadata.annotations['"+batchv1.JobCompletionIndexAnnotation+"']" ||
		path == "metadata.labels['"+batchv1.JobCompletionIndexAnnotation+"']"
}

// HandOver is what the controller writes on spare to give it index i for attempt n: the
// completion-index label and annotation, and the attempt label of the attempt it joins. A
// merge patch of it, on a spare the cache shows, is the whole hand-over.
func HandOver(spare *corev1.Pod, i int, n int32) *corev1.Pod {
	p := spare.DeepCopy()
	index := strconv.Itoa(i)
	p.Labels = merge(p.Labels, map[string]string{batchv1.JobCompletionIndexAnnotation: index, v1alpha1.LabelAttempt: strconv.Itoa(int(n))})
	p.Annotations = merge(p.Annotations, map[string]string{batchv1.JobCompletionIndexAnnotation: index})
	return p
}
