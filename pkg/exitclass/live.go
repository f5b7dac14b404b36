package exitclass

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// LiveCount counts the pods of list for which match holds and that may still run. Whether a
// pod has ended comes from the cache's copy (a phase never leaves Succeeded or Failed); a pod
// the cache does not have counts as live.
func LiveCount(list []metav1.PartialObjectMetadata, match func(*metav1.PartialObjectMetadata) bool, cached []*corev1.Pod, nodes map[string]NodeFacts) int {
	byUID := make(map[types.UID]*corev1.Pod, len(cached))
	for _, p := range cached {
		byUID[p.UID] = p
	}
	live := 0
	for i := range list {
		p := &list[i]
		if !match(p) {
			continue
		}
		if c, ok := byUID[p.UID]; ok && Gone(c, nodes) {
			continue
		}
		live++
	}
	return live
}
