package kueue

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func testRun() *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "team-a", UID: "uid-1", Labels: map[string]string{v1alpha1.LabelQueueName: "lq"}},
		Spec: v1alpha1.TrainingRunSpec{Workers: 4, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "w", Image: "i", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("8")},
			}}},
		}}},
	}
}

func TestWorkloadName(t *testing.T) {
	run := testRun()
	a := WorkloadName(run)
	if !strings.HasPrefix(a, "trainingrun-llm-") || len(a) != len("trainingrun-llm-")+5 {
		t.Errorf("WorkloadName = %q, want trainingrun-llm-<5 hex>", a)
	}
	again := run.DeepCopy()
	again.UID = "uid-2"
	if b := WorkloadName(again); b == a {
		t.Errorf("a run made again under the same name got the same Workload name %q", b)
	}
	long := run.DeepCopy()
	long.Name = strings.Repeat("x", 300)
	if n := WorkloadName(long); len(n) > maxNameLength {
		t.Errorf("WorkloadName of a long name has %d characters, over %d", len(n), maxNameLength)
	}
}

func TestNewWorkload(t *testing.T) {
	run := testRun()
	run.Spec.Suspend = ptr.To(true)
	sets, err := PodSets(run, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err := NewWorkload(run, sets, Priority{Value: 100, Group: PriorityClassGroupPod, Kind: PriorityClassKindPod, Name: "low"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	if w.Spec.QueueName != "lq" || w.Active() || ptr.Deref(w.Spec.Priority, 0) != 100 {
		t.Errorf("spec = %+v, want queue lq, inactive (the run is suspended), priority 100", w.Spec)
	}
	if len(w.Spec.PodSets) != 1 || w.Spec.PodSets[0].Name != v1alpha1.PodSetWorkers || w.Spec.PodSets[0].Count != 4 {
		t.Fatalf("pod sets = %+v, want one workers of 4", w.Spec.PodSets)
	}
	if got := w.Spec.PodSets[0].Template.Spec.Containers[0].Resources.Limits[v1alpha1.ResourceGPU]; got.String() != "8" {
		t.Errorf("pod set's GPU limit %s, want the template's 8", got.String())
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "podSets", "0", "template", "metadata", "creationTimestamp"); found {
		t.Error("the template has a null creationTimestamp, which Kueue's schema refuses")
	}
	if o := metav1.GetControllerOf(u); o == nil || o.UID != run.UID || o.Kind != v1alpha1.KindTrainingRun {
		t.Errorf("controller %+v, want the run", o)
	}
	if got := u.GetAnnotations()[v1alpha1.AnnotationPodSets]; got != Digest(sets) || got == "" {
		t.Errorf("annotation %s = %q, want the pod sets' digest %q", v1alpha1.AnnotationPodSets, got, Digest(sets))
	}
}

func cond(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason}
}

func TestAdmitted(t *testing.T) {
	admitted := []metav1.Condition{cond(ConditionQuotaReserved, metav1.ConditionTrue, "QuotaReserved"), cond(ConditionAdmitted, metav1.ConditionTrue, "Admitted")}
	for name, tc := range map[string]struct {
		conds []metav1.Condition
		want  bool
	}{
		"admitted":                  {admitted, true},
		"quota only (checks)":       {admitted[:1], false},
		"nothing yet":               {nil, false},
		"evicted, quota not back":   {append(admitted, cond(ConditionEvicted, metav1.ConditionTrue, EvictedByPreemption)), false},
		"finished":                  {append(admitted, cond(ConditionFinished, metav1.ConditionTrue, ReasonSucceeded)), false},
		"readmitted after eviction": {append(admitted, cond(ConditionEvicted, metav1.ConditionFalse, "QuotaReserved")), true},
	} {
		t.Run(name, func(t *testing.T) {
			w := &Workload{Status: WorkloadStatus{Conditions: tc.conds}}
			if got := w.Admitted(); got != tc.want {
				t.Errorf("Admitted() = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestPodsReady(t *testing.T) {
	c := func(s metav1.ConditionStatus, reason string) *metav1.Condition {
		x := cond(ConditionPodsReady, s, reason)
		return &x
	}
	for name, tc := range map[string]struct {
		cur      *metav1.Condition
		allReady bool
		admitted bool
		want     string // status/reason
	}{
		"not admitted":                     {nil, false, false, "False/WaitForStart"},
		"admitted, starting":               {nil, false, true, "False/WaitForStart"},
		"first start":                      {c(metav1.ConditionFalse, ReasonWaitForStart), true, true, "True/Started"},
		"running":                          {c(metav1.ConditionTrue, ReasonStarted), true, true, "True/Started"},
		"restart: never WaitForRecovery":   {c(metav1.ConditionTrue, ReasonStarted), false, true, "False/" + v1alpha1.ReasonGangRestarting},
		"held restart stays so":            {c(metav1.ConditionFalse, v1alpha1.ReasonGangRestarting), false, true, "False/" + v1alpha1.ReasonGangRestarting},
		"restarted":                        {c(metav1.ConditionFalse, v1alpha1.ReasonGangRestarting), true, true, "True/Recovered"},
		"recovered stays":                  {c(metav1.ConditionTrue, ReasonRecovered), true, true, "True/Recovered"},
		"evicted: next admission afresh":   {c(metav1.ConditionTrue, ReasonStarted), false, false, "False/WaitForStart"},
		"never started: Kueue still times": {c(metav1.ConditionFalse, ReasonWaitForStart), false, true, "False/WaitForStart"},
	} {
		t.Run(name, func(t *testing.T) {
			got := PodsReady(tc.cur, RunState{AllReady: tc.allReady, Attempt: 2}, tc.admitted)
			if s := string(got.Status) + "/" + got.Reason; s != tc.want {
				t.Errorf("PodsReady = %s (%s), want %s", s, got.Message, tc.want)
			}
		})
	}
}

func TestInfoAndApply(t *testing.T) {
	tol := func(k string) corev1.Toleration {
		return corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	}
	flavors := map[string]*ResourceFlavor{
		"h100": {Spec: ResourceFlavorSpec{NodeLabels: map[string]string{"gpu": "h100"}, Tolerations: []corev1.Toleration{tol("gpu")}}},
		"cpu":  {Spec: ResourceFlavorSpec{NodeLabels: map[string]string{"pool": "main"}}},
		"a100": {Spec: ResourceFlavorSpec{NodeLabels: map[string]string{"gpu": "a100"}}},
	}
	for name, tc := range map[string]struct {
		flavors map[string]string
		checks  []AdmissionCheckState
		tmpl    corev1.PodTemplateSpec
		want    corev1.PodTemplateSpec
		wantErr string
	}{
		"one flavor": {
			flavors: map[string]string{v1alpha1.ResourceGPU: "h100"},
			want:    corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"gpu": "h100"}, Tolerations: []corev1.Toleration{tol("gpu")}}},
		},
		"two flavors and a check's update": {
			flavors: map[string]string{v1alpha1.ResourceGPU: "h100", "cpu": "cpu"},
			checks: []AdmissionCheckState{{Name: "prov", State: "Ready", PodSetUpdates: []PodSetUpdate{
				{Name: v1alpha1.PodSetWorkers, Labels: map[string]string{"l": "v"}, Annotations: map[string]string{"a": "v"}, NodeSelector: map[string]string{"zone": "z1"}, Tolerations: []corev1.Toleration{tol("prov")}},
				{Name: "other", Labels: map[string]string{"x": "y"}},
			}}},
			tmpl: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{tol("gpu")}}},
			want: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"l": "v"}, Annotations: map[string]string{"a": "v"}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"gpu": "h100", "pool": "main", "zone": "z1"},
					Tolerations:  []corev1.Toleration{tol("gpu"), tol("prov")},
				},
			},
		},
		"the template says another node": {
			flavors: map[string]string{v1alpha1.ResourceGPU: "h100"},
			tmpl:    corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"gpu": "a100"}}},
			wantErr: "spec.template.spec.nodeSelector: gpu=h100 conflicts with gpu=a100",
		},
		"a check contradicts the flavor": {
			flavors: map[string]string{v1alpha1.ResourceGPU: "h100"},
			checks:  []AdmissionCheckState{{Name: "prov", PodSetUpdates: []PodSetUpdate{{Name: v1alpha1.PodSetWorkers, NodeSelector: map[string]string{"gpu": "a100"}}}}},
			wantErr: "admission check prov podSetUpdates.nodeSelector",
		},
		"unknown flavor": {
			flavors: map[string]string{v1alpha1.ResourceGPU: "gone"},
			wantErr: "resource flavor gone of the admission not found",
		},
	} {
		t.Run(name, func(t *testing.T) {
			a := &PodSetAssignment{Name: v1alpha1.PodSetWorkers, Flavors: tc.flavors}
			info, err := Info(a, flavors, tc.checks)
			tmpl := tc.tmpl
			if err == nil {
				err = Apply(&tmpl, info)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, tmpl); d != "" {
				t.Errorf("template (-want +got):\n%s", d)
			}
		})
	}
}

func TestAssignments(t *testing.T) {
	workers := []PodSet{{Name: v1alpha1.PodSetWorkers, Count: 4}}
	roles := []PodSet{{Name: "chief", Count: 1}, {Name: "ps", Count: 2}}
	for name, tc := range map[string]struct {
		sets    []PodSet
		adm     *Admission
		wantErr string
	}{
		"whole":          {sets: workers, adm: &Admission{ClusterQueue: "cq", PodSetAssignments: []PodSetAssignment{{Name: v1alpha1.PodSetWorkers, Count: ptr.To[int32](4)}}}},
		"roles":          {sets: roles, adm: &Admission{PodSetAssignments: []PodSetAssignment{{Name: "ps", Count: ptr.To[int32](2)}, {Name: "chief"}}}},
		"none":           {sets: workers, wantErr: "has no admission"},
		"partial":        {sets: workers, adm: &Admission{PodSetAssignments: []PodSetAssignment{{Name: v1alpha1.PodSetWorkers, Count: ptr.To[int32](2)}}}, wantErr: "status.admission.podSetAssignments[0].count is 2"},
		"tas":            {sets: workers, adm: &Admission{PodSetAssignments: []PodSetAssignment{{Name: v1alpha1.PodSetWorkers, TopologyAssignment: map[string]any{"levels": []any{}}}}}, wantErr: "topologyAssignment"},
		"other":          {sets: workers, adm: &Admission{PodSetAssignments: []PodSetAssignment{{Name: "main"}}}, wantErr: `no pod set "workers"`},
		"a role missing": {sets: roles, adm: &Admission{PodSetAssignments: []PodSetAssignment{{Name: "chief"}}}, wantErr: `no pod set "ps"`},
	} {
		t.Run(name, func(t *testing.T) {
			w := &Workload{ObjectMeta: metav1.ObjectMeta{Name: "wl"}, Status: WorkloadStatus{Admission: tc.adm}}
			got, err := w.Assignments(tc.sets)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if err == nil && len(got) != len(tc.sets) {
				t.Errorf("assignments %v, want one per pod set %v", got, tc.sets)
			}
		})
	}
}

func TestClearAdmission(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		reason       string
		wantRequeued metav1.ConditionStatus
	}{
		"preempted":   {EvictedByPreemption, metav1.ConditionTrue},
		"deactivated": {"Deactivated", metav1.ConditionFalse},
	} {
		t.Run(name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
				"admission": map[string]any{"clusterQueue": "cq", "podSetAssignments": []any{}},
				"conditions": []any{
					map[string]any{"type": ConditionQuotaReserved, "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": "2026-11-26T00:00:00Z"},
					map[string]any{"type": ConditionAdmitted, "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": "2026-11-26T00:00:00Z"},
				},
			}}}
			ev := &metav1.Condition{Type: ConditionEvicted, Status: metav1.ConditionTrue, Reason: tc.reason, Message: "Preempted to accommodate a workload (UID: x)"}
			changed, err := ClearAdmission(u, ev, now)
			if err != nil || !changed {
				t.Fatalf("ClearAdmission = %t, %v", changed, err)
			}
			w, err := Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			if w.Status.Admission != nil || w.HoldsQuota() || w.Admitted() {
				t.Errorf("admission %+v still held", w.Status.Admission)
			}
			if c := w.Condition(ConditionRequeued); c == nil || c.Status != tc.wantRequeued || c.Reason != tc.reason {
				t.Errorf("Requeued %+v, want %s with reason %s", c, tc.wantRequeued, tc.reason)
			}
			if again, _ := ClearAdmission(u, ev, now); again {
				t.Error("a second ClearAdmission changed the Workload again")
			}
		})
	}
}

func TestEnabled(t *testing.T) {
	served := func(ok bool) func() (bool, error) { return func() (bool, error) { return ok, nil } }
	for name, tc := range map[string]struct {
		mode    string
		served  bool
		want    bool
		wantErr string
	}{
		"auto, served":     {mode: ModeAuto, served: true, want: true},
		"auto, not served": {mode: ModeAuto},
		"on, served":       {mode: ModeOn, served: true, want: true},
		"on, not served":   {mode: ModeOn, wantErr: "--kueue=true: the cluster serves no kueue.x-k8s.io/v1beta2 Workloads"},
		"off":              {mode: ModeOff, served: true},
		"bad":              {mode: "yes", wantErr: `--kueue: "yes" is none of auto, true, false`},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Enabled("kueue", tc.mode, served(tc.served))
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) || got != tc.want {
				t.Errorf("Enabled = %t, %v; want %t, %q", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestPreemptorUID(t *testing.T) {
	for msg, want := range map[string]string{
		"Preempted to accommodate a workload (UID: 2a9ccf73-40fa-4464-bbb1-08de076cb0fa, JobUID: 7b1e) due to prioritization in the ClusterQueue": "2a9ccf73-40fa-4464-bbb1-08de076cb0fa",
		"Exceeded the PodsReady timeout ns/wl": "",
	} {
		if got := PreemptorUID(msg); got != want {
			t.Errorf("PreemptorUID(%q) = %q, want %q", msg, got, want)
		}
	}
	w := &Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "trainingrun-llm-3f2a1",
		OwnerReferences: []metav1.OwnerReference{{Kind: "TrainingRun", Name: "llm", Controller: ptr.To(true)}}}}
	if got := Describe(w); got != "team-b/trainingrun-llm-3f2a1 (TrainingRun team-b/llm)" {
		t.Errorf("Describe = %q", got)
	}
}
