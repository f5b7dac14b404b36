// Package podgroup puts a gang run's workers in one scheduling group of Kubernetes 1.37's
// workload-aware scheduling (KEP-4671, scheduling.k8s.io/v1beta1): a PodGroup per run whose
// gang policy has the scheduler bind all of the run's workers or none, and the field of each
// worker that names it (spec.schedulingGroup). Without it a restart's new pods bind one by
// one as they fit, and a gang that cannot fit whole holds GPUs it cannot use while its
// workers wait for the last one.
//
// The run's one PodGroup serves every attempt: a restart creates its pods only once no pod
// of the run is left (one pod per index), so each attempt's workers gather in it anew, and a
// pod that replaces one worker (an index moved in place) joins a group whose others are
// already bound. An Index-scope run is no gang (its indexes come and go one by one, some
// finished), and gets none.
//
// A cluster serves the API from 1.37 with the GenericWorkload feature and the beta API
// (--runtime-config=scheduling.k8s.io/v1beta1=true) on; 1.36 serves none, and runs there are
// scheduled pod by pod as before.
package podgroup

import (
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Kind is the object the scheduler gathers a gang by.
const Kind = "PodGroup"

// GroupVersion is the one version of the API faultline writes.
var GroupVersion = schedulingv1beta1.SchemeGroupVersion

// Served reports whether the cluster serves PodGroups at GroupVersion. An error is
// discovery's own (the API server unreachable), not an answer.
func Served(m meta.RESTMapper) (bool, error) {
	_, err := m.RESTMapping(schema.GroupKind{Group: GroupVersion.Group, Kind: Kind}, GroupVersion.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	}
	return false, err
}

// Gang reports whether run's workers are scheduled as one: every run but an Index-scope one.
func Gang(run *v1alpha1.TrainingRun) bool {
	return run.Spec.RestartScope != v1alpha1.RestartScopeIndex
}

// For is run's PodGroup: its name is the run's (Name), it carries the run's labels, and its
// gang policy asks for all the run's workers. Its creator makes the run its controller, as
// of the run's other objects, so that the garbage collector deletes it with the run.
func For(run *v1alpha1.TrainingRun) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{
			Name:      Name(run),
			Namespace: run.Namespace,
			Labels:    map[string]string{v1alpha1.LabelRun: run.Name, v1alpha1.LabelRunUID: string(run.UID)},
		},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: run.Spec.Workers},
			},
		},
	}
}

// Name is the name of run's PodGroup, which its workers name in spec.schedulingGroup.
func Name(run *v1alpha1.TrainingRun) string { return run.Name }
