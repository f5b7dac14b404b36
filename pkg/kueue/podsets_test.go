package kueue

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// psRun is a parameter-server layout as issue 38 found it: the template asks for no GPU,
// the workers' role for eight each.
func psRun() *v1alpha1.TrainingRun {
	run := testRun()
	run.Spec.Framework = "tensorflow"
	run.Spec.Workers = 6
	run.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	run.Spec.Roles = []v1alpha1.RoleTemplate{
		{Name: "worker", NodeSelector: map[string]string{"pool": "gpu"}, Containers: []v1alpha1.RoleContainer{{Name: "w", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("8")},
		}}}},
	}
	return run
}

var psLayout = []Role{{Name: "chief", Count: 1}, {Name: "ps", Count: 2}, {Name: "worker", Count: 3}}

func gpusOf(set PodSet) int64 {
	n := int64(0)
	for _, c := range set.Template.Spec.Containers {
		q := c.Resources.Limits[v1alpha1.ResourceGPU]
		n += q.Value()
	}
	return n * int64(set.Count)
}

func TestPodSetsCountEveryRole(t *testing.T) {
	sets, err := PodSets(psRun(), psLayout)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	total := int64(0)
	for _, s := range sets {
		names = append(names, s.Name)
		total += gpusOf(s)
	}
	if strings.Join(names, ",") != "chief,ps,worker" {
		t.Errorf("pod sets %v, want chief, ps, worker (the layout's order)", names)
	}
	if total != 24 {
		t.Errorf("the pod sets ask for %d GPUs, want 24 (3 workers of 8)", total)
	}
	if w := sets[2]; w.Count != 3 || w.Template.Spec.NodeSelector["pool"] != "gpu" {
		t.Errorf("worker pod set: count %d, nodeSelector %v; want 3 with the role's pool=gpu", w.Count, w.Template.Spec.NodeSelector)
	}
	if ps := sets[1]; gpusOf(ps) != 0 || ps.Template.Spec.NodeSelector["pool"] != "" {
		t.Errorf("ps pod set asks %d GPUs on %v, want the template's: none, anywhere", gpusOf(ps), ps.Template.Spec.NodeSelector)
	}

	if _, err := PodSets(psRun(), nil); err == nil || !strings.Contains(err.Error(), "spec.roles") {
		t.Errorf("roles without a layout: error %v, want one naming spec.roles", err)
	}
	if _, err := PodSets(psRun(), psLayout[:2]); err == nil || !strings.Contains(err.Error(), "spec.workers 6") {
		t.Errorf("a layout of 3 pods for 6 workers: error %v, want one naming spec.workers", err)
	}
}

func TestOutdated(t *testing.T) {
	run := psRun()
	sets, _ := PodSets(run, psLayout)
	w := &Workload{ObjectMeta: metav1.ObjectMeta{Name: "wl", Annotations: map[string]string{v1alpha1.AnnotationPodSets: Digest(sets)}}}
	if why := w.Outdated(sets); why != "" {
		t.Errorf("same pod sets: outdated %q", why)
	}
	grown := run.DeepCopy()
	grown.Spec.Roles[0].Containers[0].Resources.Limits[v1alpha1.ResourceGPU] = resource.MustParse("16")
	more, _ := PodSets(grown, psLayout)
	if why := w.Outdated(more); !strings.Contains(why, "spec.template or spec.roles changed") || !strings.Contains(why, "wl") {
		t.Errorf("a role asking for more GPUs: outdated %q, want the change named", why)
	}
	old := &Workload{ObjectMeta: metav1.ObjectMeta{Name: "wl"}}
	if why := old.Outdated(more); why != "" {
		t.Errorf("a Workload made before the digest: outdated %q, want it taken as it is", why)
	}
}

func TestPlace(t *testing.T) {
	gpu := PodSetInfo{NodeSelector: map[string]string{"flavor": "h100"}, Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}, Labels: map[string]string{"l": "v"}}
	cpu := PodSetInfo{NodeSelector: map[string]string{"flavor": "cpu"}, Labels: map[string]string{"l": "v"}}

	t.Run("without roles", func(t *testing.T) {
		tmpl := &corev1.PodTemplateSpec{}
		roles, err := Place(tmpl, nil, map[string]PodSetInfo{v1alpha1.PodSetWorkers: gpu})
		if err != nil || roles != nil || tmpl.Spec.NodeSelector["flavor"] != "h100" || len(tmpl.Spec.Tolerations) != 1 {
			t.Errorf("roles %v, err %v, template %+v: want the flavor on the template", roles, err, tmpl.Spec)
		}
	})
	t.Run("roles", func(t *testing.T) {
		tmpl := &corev1.PodTemplateSpec{}
		in := psRun().Spec.Roles
		roles, err := Place(tmpl, in, map[string]PodSetInfo{"ps": cpu, "worker": gpu, "chief": cpu})
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]v1alpha1.RoleTemplate{}
		for _, r := range roles {
			by[r.Name] = r
		}
		if by["worker"].NodeSelector["flavor"] != "h100" || by["worker"].NodeSelector["pool"] != "gpu" || len(by["worker"].Tolerations) != 1 {
			t.Errorf("worker role %+v: want its own pool and the h100 flavor, with its toleration", by["worker"])
		}
		if by["ps"].NodeSelector["flavor"] != "cpu" || by["chief"].NodeSelector["flavor"] != "cpu" {
			t.Errorf("roles %+v: want ps and chief on the cpu flavor", roles)
		}
		if tmpl.Labels["l"] != "v" || tmpl.Spec.NodeSelector != nil {
			t.Errorf("template %+v: want the shared label, no node selector (each role has its own)", tmpl)
		}
		if in[0].NodeSelector["flavor"] != "" {
			t.Errorf("Place changed the run's own spec.roles: %+v", in[0])
		}
	})
	t.Run("a role's node selector cannot leave its flavor", func(t *testing.T) {
		in := psRun().Spec.Roles
		in[0].NodeSelector["flavor"] = "a100"
		_, err := Place(&corev1.PodTemplateSpec{}, in, map[string]PodSetInfo{"worker": gpu})
		if err == nil || !strings.Contains(err.Error(), "spec.roles[worker].nodeSelector: flavor=a100") {
			t.Errorf("error %v, want spec.roles[worker].nodeSelector named", err)
		}
	})
	t.Run("nor the template's", func(t *testing.T) {
		tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"flavor": "a100"}}}
		_, err := Place(tmpl, nil, map[string]PodSetInfo{"ps": cpu})
		if err == nil || !strings.Contains(err.Error(), "spec.template.spec.nodeSelector: flavor=a100") {
			t.Errorf("error %v, want spec.template.spec.nodeSelector named", err)
		}
	})
	t.Run("roles given other labels", func(t *testing.T) {
		_, err := Place(&corev1.PodTemplateSpec{}, nil, map[string]PodSetInfo{"ps": cpu, "worker": {Labels: map[string]string{"l": "w"}}})
		if err == nil || !strings.Contains(err.Error(), "every role") {
			t.Errorf("error %v, want the shared labels named", err)
		}
	})
}

func TestFlavorsOf(t *testing.T) {
	got := FlavorsOf(&Admission{PodSetAssignments: []PodSetAssignment{
		{Name: "ps", Flavors: map[string]string{"cpu": "cpu-pool"}},
		{Name: "worker", Flavors: map[string]string{"cpu": "gpu-pool", v1alpha1.ResourceGPU: "gpu-pool"}},
	}})
	if got["cpu"] != "cpu-pool, gpu-pool" || got[v1alpha1.ResourceGPU] != "gpu-pool" {
		t.Errorf("FlavorsOf = %v", got)
	}
}

// TestPodSetsCarryTheRunsGPUClaim (issue 58): a run that asks for its GPUs through DRA has
// them in its Workload as its workers do: the pod set's template names the run's
// ResourceClaimTemplate, which Kueue reads to count the devices against its quota.
func TestPodSetsCarryTheRunsGPUClaim(t *testing.T) {
	run := testRun()
	run.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	run.Spec.GPUs = &v1alpha1.GPUClaim{DeviceClassName: "gpu.nvidia.com", Count: 8}
	sets, err := PodSets(run, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := sets[0].Template.Spec
	if len(spec.ResourceClaims) != 1 || spec.ResourceClaims[0].Name != v1alpha1.ClaimGPUs ||
		spec.ResourceClaims[0].ResourceClaimTemplateName == nil || *spec.ResourceClaims[0].ResourceClaimTemplateName != run.Name {
		t.Errorf("pod set's resourceClaims %+v, want %s from the ResourceClaimTemplate %s", spec.ResourceClaims, v1alpha1.ClaimGPUs, run.Name)
	}
	if claims := spec.Containers[0].Resources.Claims; len(claims) != 1 || claims[0].Name != v1alpha1.ClaimGPUs {
		t.Errorf("worker container's claims %+v, want %s", claims, v1alpha1.ClaimGPUs)
	}
	if run.Spec.Template.Spec.ResourceClaims != nil {
		t.Error("PodSets changed the run's own template")
	}
}
