package expansion

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestContainer(t *testing.T) {
	index := "metadata.annotations['batch.kubernetes.io/job-completion-index']"
	env := []corev1.EnvVar{
		{Name: "FAULTLINE_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: index}}},
		{Name: "ID", Value: "worker-$(FAULTLINE_INDEX)"},
	}
	got, err := Container(env, map[string]string{index: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"FAULTLINE_INDEX": "2", "ID": "worker-2"}, got); diff != "" {
		t.Errorf("Container (-want +got):\n%s", diff)
	}
	if _, err := Container(env, nil); err == nil {
		t.Error("a field without a value resolved")
	}
	secret := []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}
	if _, err := Container(secret, nil); err == nil {
		t.Error("a secretKeyRef resolved")
	}
}

// TestPod: fieldRefs resolve from the pod as the kubelet's downward API does (a missing label
// is empty), and a later value expands them: a JSON task built of two labels.
func TestPod(t *testing.T) {
	ref := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	env := []corev1.EnvVar{
		{Name: "INDEX", ValueFrom: ref("metadata.annotations['batch.kubernetes.io/job-completion-index']")},
		{Name: "ROLE", ValueFrom: ref("metadata.labels['faultline.dev/role']")},
		{Name: "ROLE_INDEX", ValueFrom: ref("metadata.labels['faultline.dev/role-index']")},
		{Name: "NAME", ValueFrom: ref("metadata.name")},
		{Name: "TASK", Value: `{"type":"$(ROLE)","index":$(ROLE_INDEX)}`},
	}
	pod := &corev1.Pod{}
	pod.Name = "r-2-abcde"
	pod.Annotations = map[string]string{"batch.kubernetes.io/job-completion-index": "2"}
	pod.Labels = map[string]string{"faultline.dev/role": "ps", "faultline.dev/role-index": "1"}
	got, err := Pod(env, pod)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"INDEX": "2", "ROLE": "ps", "ROLE_INDEX": "1", "NAME": "r-2-abcde", "TASK": `{"type":"ps","index":1}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("labelled pod (-want +got):\n%s", diff)
	}
	pod.Labels = nil
	if got, err = Pod(env, pod); err != nil || got["ROLE"] != "" || got["TASK"] != `{"type":"","index":}` {
		t.Errorf("unlabelled pod: ROLE=%q TASK=%q, %v; want both labels empty, as the kubelet resolves a missing label", got["ROLE"], got["TASK"], err)
	}
}
