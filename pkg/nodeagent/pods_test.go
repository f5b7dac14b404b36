package nodeagent

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func TestNodePodInformerWatchesOnlyItsNode(t *testing.T) {
	client := fake.NewClientset(makePod("r-0").run("r").obj())
	// The fake clientset replays nothing: a delete between the informer's List and its Watch
	// would be lost. Know when the Watch is in place (client-go's fake-client example).
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("pods", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(watching) })
		return true, w, nil
	})
	informer := NodePodInformer(clientsetKube{client}, node, 0)
	lister := corelisters.NewPodLister(informer.GetIndexer())
	w, err := NewWriter(WriterConfig{
		Client: clientsetKube{client}, Node: node, Pods: lister,
		Backoff: wait.Backoff{Duration: time.Millisecond, Steps: 2},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ForgetDeletedPods(informer, w, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		informer.RunWithContext(ctx)
	}()
	defer func() {
		cancel()
		<-stopped
	}()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("pod cache did not sync")
	}
	<-watching

	for _, a := range client.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "pods" {
			if got := l.GetListRestrictions().Fields.String(); got != "spec.nodeName="+node {
				t.Errorf("pods listed with field selector %q, want spec.nodeName=%s", got, node)
			}
		}
	}

	// The writer reads the cache.
	if _, err := w.MarkPod(ctx, ref("r-0"), xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
			t.Error("pod read from the API although it is in the cache")
		}
	}
	refs, err := w.RunPods(ctx)
	if err != nil || len(refs) != 1 || refs[0] != ref("r-0") {
		t.Errorf("RunPods from the cache = %v, %v", refs, err)
	}

	// Deleting the pod makes the writer forget it.
	p := getPod(t, client, "r-0")
	if err := client.CoreV1().Pods("ml").Delete(ctx, "r-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.mu.Lock()
		_, remembered := w.written[p.UID]
		w.mu.Unlock()
		if !remembered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("deleted pod still remembered")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlimPodKeepsWhatTheAgentReads: the informer's transform drops a worker's environment
// (its rendezvous lists the whole gang), volumes and managed fields, and keeps every field
// the agent reads: metadata, node, containers' GPU limits, init containers' names (the
// barrier), the termination grace period, phase, conditions, statuses.
func TestSlimPodKeepsWhatTheAgentReads(t *testing.T) {
	full := makePod("r-0").run("r").obj()
	full.Annotations = map[string]string{v1alpha1.AnnotationFaultEvidence: "{}"}
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	full.Spec.Volumes = []corev1.Volume{{Name: "data"}}
	full.Spec.TerminationGracePeriodSeconds = ptrTo[int64](45)
	full.Spec.InitContainers = []corev1.Container{{Name: v1alpha1.BarrierContainer, Image: "barrier", Args: []string{"wait"}}}
	full.Spec.Containers = []corev1.Container{{
		Name: "worker", Image: "trainer",
		Env:       []corev1.EnvVar{{Name: "TF_CONFIG", Value: strings.Repeat("x", 4096)}},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("8")}},
	}}
	full.Status = corev1.PodStatus{
		Phase:             corev1.PodRunning,
		Conditions:        []corev1.PodCondition{{Type: v1alpha1.PodConditionInfrastructureFault, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", RestartCount: 1}},
		PodIP:             "10.0.0.7",
	}
	got, err := slimPod(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	slim := got.(*corev1.Pod)
	want := full.DeepCopy()
	want.ManagedFields = nil
	want.Spec = corev1.PodSpec{
		NodeName: full.Spec.NodeName, Containers: []corev1.Container{{Name: "worker", Resources: full.Spec.Containers[0].Resources}},
		InitContainers: []corev1.Container{{Name: v1alpha1.BarrierContainer}}, TerminationGracePeriodSeconds: ptrTo[int64](45),
	}
	want.Status.PodIP = ""
	if diff := cmp.Diff(want, slim); diff != "" {
		t.Errorf("slim pod (-want +got):\n%s", diff)
	}
	// A tombstone passes through.
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/r-0"}
	if got, _ := slimPod(tomb); got != tomb {
		t.Errorf("tombstone became %v", got)
	}
}
