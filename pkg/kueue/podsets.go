package kueue

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/gpuclaim"
)

// Role is one role of the framework's layout, in index order: its name and its pod count.
type Role struct {
	Name  string
	Count int32
}

// PodSets are the pod sets of run's Workload, which is what Kueue counts against quota. A
// run without spec.roles has one, PodSetWorkers, of spec.workers + spec.spares pods shaped
// as its template. A run with spec.roles has one per role of its framework's layout (roles, in
// index order), named as the role and shaped as that role's pods (spec.template with what
// spec.roles sets for it, as pkg/attempt makes them): a parameter server that asks for no
// GPU and a worker that asks for eight are counted so, and Kueue chooses each role's flavor
// for the role's own resources and nodes. faultline's own additions to the pods (env,
// ports, the barrier, the exclusion of faulty nodes) ask for no resource and are left out,
// so that the Workload never has to change between attempts.
func PodSets(run *v1alpha1.TrainingRun, roles []Role) ([]PodSet, error) {
	base := run.Spec.Template.DeepCopy()
	base.Spec.RestartPolicy = corev1.RestartPolicyNever
	// The GPUs a run asks for through DRA are its workers' claims from its
	// ResourceClaimTemplate: Kueue counts their devices where its configuration maps the
	// DeviceClass to a quota resource (docs/kueue.md).
	gpuclaim.Apply(&base.Spec, run)
	if len(run.Spec.Roles) == 0 {
		// A warm spare holds a worker's resources from its start: Kueue counts it as one.
		return []PodSet{{Name: v1alpha1.PodSetWorkers, Count: run.Spec.Workers + run.Spec.Spares, Template: *base}}, nil
	}
	if len(roles) == 0 {
		return nil, fmt.Errorf("spec.roles: framework %q lays out no roles, so no pod has a role to count: remove spec.roles", run.Spec.Framework)
	}
	sets := make([]PodSet, 0, len(roles))
	total := int32(0)
	for _, r := range roles {
		tmpl := base.DeepCopy()
		if k := slices.IndexFunc(run.Spec.Roles, func(t v1alpha1.RoleTemplate) bool { return t.Name == r.Name }); k >= 0 {
			attempt.ApplyRole(&tmpl.Spec, &run.Spec.Roles[k])
		}
		sets = append(sets, PodSet{Name: r.Name, Count: r.Count, Template: *tmpl})
		total += r.Count
	}
	if total != run.Spec.Workers {
		return nil, fmt.Errorf("framework %q lays out %d pods in roles, the run has spec.workers %d", run.Spec.Framework, total, run.Spec.Workers)
	}
	return sets, nil
}

// Digest identifies pod sets (AnnotationPodSets): equal pod sets, equal digests.
func Digest(sets []PodSet) string {
	raw, err := json.Marshal(sets)
	if err != nil {
		panic(fmt.Sprintf("marshal pod sets: %v", err)) // plain data: cannot fail
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// Outdated says why the run's pod sets (sets) are no longer those the Workload was made
// with, or "": spec.template or spec.roles changed after faultline queued the Workload, and
// what Kueue admitted is not what an attempt would run. A Workload made before the digest
// was written (an older faultline) is taken as it is.
func (w *Workload) Outdated(sets []PodSet) string {
	made, ok := w.Annotations[v1alpha1.AnnotationPodSets]
	if !ok || made == Digest(sets) {
		return ""
	}
	return fmt.Sprintf("spec.template or spec.roles changed after the run's Workload %s was queued: Kueue admits (or admitted) the pods as they were, not as they are now; "+
		"restore them, or delete the run and create it again to queue the new pods (the admission policy %s refuses such a change where it is installed)", w.Name, v1alpha1.QueuePolicyName)
}

// Assignments are the admission's assignments by pod set, one for each of sets. It refuses
// what faultline cannot honour: no admission, a pod set missing, a partial admission (a
// gang runs whole or not at all), and Topology-Aware Scheduling (its pods would wait for
// Kueue's TAS ungater, which knows only the Jobs of its own integrations).
func (w *Workload) Assignments(sets []PodSet) (map[string]*PodSetAssignment, error) {
	if w.Status.Admission == nil {
		return nil, fmt.Errorf("workload %s has no admission", w.Name)
	}
	out := make(map[string]*PodSetAssignment, len(sets))
	for _, set := range sets {
		i := slices.IndexFunc(w.Status.Admission.PodSetAssignments, func(a PodSetAssignment) bool { return a.Name == set.Name })
		if i < 0 {
			return nil, fmt.Errorf("workload %s: status.admission.podSetAssignments has no pod set %q", w.Name, set.Name)
		}
		a := &w.Status.Admission.PodSetAssignments[i]
		if n := ptr.Deref(a.Count, set.Count); n != set.Count {
			return nil, fmt.Errorf("workload %s: status.admission.podSetAssignments[%d].count is %d, pod set %s has %d pods: a partial admission cannot run a gang", w.Name, i, n, set.Name, set.Count)
		}
		if a.TopologyAssignment != nil {
			return nil, fmt.Errorf("workload %s: status.admission.podSetAssignments[%d].topologyAssignment is set: faultline does not support Kueue's Topology-Aware Scheduling", w.Name, i)
		}
		out[set.Name] = a
	}
	return out, nil
}

// Place puts the admission of each pod set (infos, by pod set) onto an attempt: a run
// without roles gets it on its pod template (Apply); a run with roles gets each role's node
// labels and tolerations on its role template (returned: the attempt's pods are made from
// them), and the labels and annotations, which the pods of one Job share, on the pod
// template. A node selector of the template or of a role that would take a pod off the
// flavor Kueue admitted it to is an error, never overridden.
func Place(tmpl *corev1.PodTemplateSpec, roles []v1alpha1.RoleTemplate, infos map[string]PodSetInfo) ([]v1alpha1.RoleTemplate, error) {
	if info, ok := infos[v1alpha1.PodSetWorkers]; ok && len(infos) == 1 {
		return roles, Apply(tmpl, info)
	}
	roles = slices.Clone(roles)
	for _, name := range slices.Sorted(maps.Keys(infos)) {
		info := infos[name]
		if err := mergeInto(&tmpl.Labels, info.Labels, "spec.template.metadata.labels"); err != nil {
			return nil, fmt.Errorf("pod set %s: %w (the pods of every role share them)", name, err)
		}
		if err := mergeInto(&tmpl.Annotations, info.Annotations, "spec.template.metadata.annotations"); err != nil {
			return nil, fmt.Errorf("pod set %s: %w (the pods of every role share them)", name, err)
		}
		k := slices.IndexFunc(roles, func(t v1alpha1.RoleTemplate) bool { return t.Name == name })
		if k < 0 {
			roles = append(roles, v1alpha1.RoleTemplate{Name: name})
			k = len(roles) - 1
		}
		rt := roles[k].DeepCopy()
		for _, key := range slices.Sorted(maps.Keys(info.NodeSelector)) {
			want := info.NodeSelector[key]
			if have, ok := rt.NodeSelector[key]; ok && have != want {
				return nil, fmt.Errorf("spec.roles[%s].nodeSelector: %s=%s would take the role's pods off the flavor Kueue admitted them to (%s=%s): remove it", name, key, have, key, want)
			}
			if have, ok := tmpl.Spec.NodeSelector[key]; ok && have != want && rt.NodeSelector[key] == "" {
				return nil, fmt.Errorf("spec.template.spec.nodeSelector: %s=%s would take role %s's pods off the flavor Kueue admitted them to (%s=%s): remove it", key, have, name, key, want)
			}
			if rt.NodeSelector == nil {
				rt.NodeSelector = map[string]string{}
			}
			rt.NodeSelector[key] = want
		}
		rt.Tolerations = appendNew(rt.Tolerations, info.Tolerations)
		roles[k] = *rt
	}
	return roles, nil
}

// FlavorsOf are the flavors of every pod set of an admission, by resource; a resource that
// pod sets got in different flavors lists them all ("a, b").
func FlavorsOf(a *Admission) map[string]string {
	byRes := map[string][]string{}
	for _, psa := range a.PodSetAssignments {
		for res, f := range psa.Flavors {
			if !slices.Contains(byRes[res], f) {
				byRes[res] = append(byRes[res], f)
			}
		}
	}
	if len(byRes) == 0 {
		return nil
	}
	out := make(map[string]string, len(byRes))
	for res, fs := range byRes {
		slices.Sort(fs)
		out[res] = strings.Join(fs, ", ")
	}
	return out
}
