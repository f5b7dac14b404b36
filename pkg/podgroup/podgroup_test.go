package podgroup

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestServed: the API counts as served only at the version faultline writes; a cluster that
// serves another version of the group (an alpha of 1.35/1.36) or none is not.
func TestServed(t *testing.T) {
	for name, tc := range map[string]struct {
		versions []schema.GroupVersion
		want     bool
	}{
		"v1beta1":       {versions: []schema.GroupVersion{GroupVersion}, want: true},
		"only v1alpha2": {versions: []schema.GroupVersion{{Group: GroupVersion.Group, Version: "v1alpha2"}}},
		"none":          {},
	} {
		t.Run(name, func(t *testing.T) {
			m := meta.NewDefaultRESTMapper(tc.versions)
			for _, gv := range tc.versions {
				m.Add(gv.WithKind(Kind), meta.RESTScopeNamespace)
			}
			got, err := Served(m)
			if err != nil || got != tc.want {
				t.Errorf("Served = %v, %v; want %v, nil", got, err, tc.want)
			}
		})
	}
}

// TestFor: a gang run's PodGroup asks for every worker and carries the run's labels;
// an Index-scope run is no gang.
func TestFor(t *testing.T) {
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-llm"}, Spec: v1alpha1.TrainingRunSpec{Workers: 16}}
	pg := For(run)
	if pg.Name != "llm" || pg.Namespace != "ml" {
		t.Errorf("PodGroup %s/%s, want ml/llm", pg.Namespace, pg.Name)
	}
	if g := pg.Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != 16 || pg.Spec.SchedulingPolicy.Basic != nil {
		t.Errorf("policy %+v, want a gang of 16", pg.Spec.SchedulingPolicy)
	}
	if pg.Labels[v1alpha1.LabelRun] != "llm" || pg.Labels[v1alpha1.LabelRunUID] != "uid-llm" {
		t.Errorf("labels %v, want the run's", pg.Labels)
	}
	if !Gang(run) {
		t.Error("a Gang-scope run is no gang")
	}
	run.Spec.RestartScope = v1alpha1.RestartScopeIndex
	if Gang(run) {
		t.Error("an Index-scope run is a gang")
	}
}
