// Package gpu runs the node agent on a machine with a real NVIDIA GPU: real NVML, a real
// driver raising a real XID, the agent's real gRPC PodResources client, and a real API
// server. It is opt-in (FAULTLINE_NVML_REAL=1) and skips elsewhere: CI has no GPU. The
// simulated-GPU scenarios of test/e2e/agent are the everyday test of the same agent.
package gpu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/gpu"
	"github.com/faultline-dev/faultline/test/cluster"
	"github.com/faultline-dev/faultline/test/procstat"
)

// envBinDir holds etcd, kube-apiserver and nodeagent built elsewhere, for a GPU machine
// without the Go toolchain; unset, the test builds them here. The others are the gpu
// package's EnvTestReal and EnvTestProvoke.
const envBinDir = "FAULTLINE_E2E_BIN_DIR"

const (
	nodeName = "real-gpu-node"
	podName  = "trainer-0"
	runName  = "real-gpu-run"
	// idleSettle is how long the agent runs before its idle memory is read: its informer
	// has synced and NVML's first health poll is done well before.
	idleSettle = 10 * time.Second
	// evidenceAfterExit bounds the wait for the evidence once the crashing command has
	// ended: it came 145-281 ms *before* the end on an H100 and 157 ms on an H200.
	evidenceAfterExit = 10 * time.Second
)

// TestE2ERealGPUProgramCrashIsNotInfrastructure: a program that crashes a kernel on the pod's
// GPU makes the driver raise XID 31 (or 13, 43); the agent must put that on the pod as the
// program's fault (AppGPUError, the pod's GPU and XID), never as infrastructure, and must not
// mark the node's GPU unhealthy.
func TestE2ERealGPUProgramCrashIsNotInfrastructure(t *testing.T) {
	if os.Getenv(gpu.EnvTestReal) != "1" {
		t.Skip("set " + gpu.EnvTestReal + "=1 (and " + gpu.EnvTestProvoke + ") on a machine with an NVIDIA GPU")
	}
	provoke := os.Getenv(gpu.EnvTestProvoke)
	if provoke == "" {
		t.Fatalf("%s is empty: give a command that crashes a kernel on GPU 0, e.g. 'python3 hack/gpu-crash.py'", gpu.EnvTestProvoke)
	}
	etcdBin, apiserverBin, agentBin := binaries(t)
	cp := startControlPlane(t, etcdBin, apiserverBin)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	uuid := firstGPU(t)
	socket := servePodResources(t, uuid)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpus := corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("1")}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{v1alpha1.LabelRun: runName, v1alpha1.LabelAttempt: "1"}},
		Spec: corev1.PodSpec{NodeName: nodeName, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "worker", Image: "trainer:latest",
				Resources: corev1.ResourceRequirements{Limits: gpus, Requests: gpus}}}},
	}
	pod, err := cp.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	httpAddr := cluster.MustFreeAddress(t)
	agent := cluster.StartProcess(t, agentBin,
		"--kubeconfig", cp.Kubeconfig, "--node-name", nodeName,
		"--pod-resources-socket", socket, "--require-gpu", "--http-address", httpAddr,
		// Never the machine's own logind: the test must not hold back its shutdown.
		"--dbus-address", "unix:path="+filepath.Join(t.TempDir(), "no-bus"))
	waitHealthy(ctx, t, httpAddr)
	time.Sleep(idleSettle) // a measurement window, not a synchronisation
	if agent.Exited() {
		t.Fatalf("the agent exited:\n%s", agent.Tail(30))
	}
	t.Logf("agent idle with real NVML: %s", memory(t, agent.Pid()))

	w, err := cp.Client.CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", podName).String(), ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The command runs while the test watches: the evidence should be on the pod before
	// the crashed program has even exited (the driver raises the XID first).
	var out bytes.Buffer
	crash := exec.CommandContext(ctx, "sh", "-c", provoke)
	crash.Stdout, crash.Stderr = &out, &out
	started := time.Now()
	if err := crash.Start(); err != nil {
		t.Fatal(err)
	}
	type exit struct {
		at  time.Time
		err error
	}
	exited := make(chan exit, 1)
	// The evidence comes before the program's exit; a command that ended without it (one
	// that could not even start its program: a wrong path) ends the wait soon after, with
	// its output, rather than at ctx's end.
	waitCtx, endWait := context.WithCancel(ctx)
	defer endWait()
	go func() {
		err := crash.Wait()
		exited <- exit{time.Now(), err}
		select {
		case <-time.After(evidenceAfterExit):
			endWait()
		case <-waitCtx.Done():
		}
	}()
	ev, err := watchtools.UntilWithoutRetry(waitCtx, w, func(e watch.Event) (bool, error) {
		p, ok := e.Object.(*corev1.Pod)
		return ok && p.Annotations[v1alpha1.AnnotationFaultEvidence] != "", nil
	})
	seen := time.Now()
	crashEnd := <-exited // the output is whole only now; ctx bounds the wait
	if err != nil {
		t.Fatalf("no evidence on the pod within %v of the crashing command's end (%v): %v\ncommand output:\n%s\nagent log:\n%s",
			evidenceAfterExit, crashEnd.err, err, out.String(), agent.Tail(30))
	}
	if crashEnd.err == nil {
		t.Fatalf("%s succeeded; it must crash a kernel on the GPU. Output:\n%s", gpu.EnvTestProvoke, out.String())
	}
	marked := ev.Object.(*corev1.Pod)
	t.Logf("evidence visible %v after the crashing command started; the command exited %v after that", seen.Sub(started), crashEnd.at.Sub(seen))

	var evidence v1alpha1.FaultEvidence
	if err := json.Unmarshal([]byte(marked.Annotations[v1alpha1.AnnotationFaultEvidence]), &evidence); err != nil {
		t.Fatalf("unreadable evidence: %v", err)
	}
	t.Logf("evidence: %+v, gpu %+v", evidence, evidence.GPU)
	if evidence.Cause != v1alpha1.CauseAppGPUError || evidence.Source != v1alpha1.EvidenceSourceNVMLEvent {
		t.Errorf("evidence cause %s from %s, want %s from %s", evidence.Cause, evidence.Source, v1alpha1.CauseAppGPUError, v1alpha1.EvidenceSourceNVMLEvent)
	}
	if g := evidence.GPU; g == nil || g.UUID != uuid || g.Index != 0 || exitclass.LookupXID(g.XID).Cause != v1alpha1.CauseAppGPUError {
		t.Errorf("evidence names GPU %+v, want GPU 0 (%s) with a program-caused XID", g, uuid)
	}
	for _, c := range marked.Status.Conditions {
		if c.Type == v1alpha1.PodConditionInfrastructureFault {
			t.Errorf("a program's GPU crash put condition %s=%s (%s) on the pod", c.Type, c.Status, c.Reason)
		}
	}
	n, err := cp.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1alpha1.NodeConditionGPUHealthy && c.Status == corev1.ConditionFalse {
			t.Errorf("a program's GPU crash set the node's %s=False (%s)", c.Type, c.Reason)
		}
	}
	t.Logf("agent after the mark: %s; %s", memory(t, agent.Pid()), metric(ctx, t, httpAddr, "faultline_nodeagent_detection_to_mark_seconds"))
}

// binaries returns etcd, kube-apiserver and nodeagent: from envBinDir, else built here.
func binaries(t *testing.T) (etcd, apiserver, agent string) {
	t.Helper()
	if dir := os.Getenv(envBinDir); dir != "" {
		return filepath.Join(dir, "etcd"), filepath.Join(dir, "kube-apiserver"), filepath.Join(dir, "nodeagent")
	}
	tools, err := cluster.FindTools()
	if err != nil {
		t.Fatal(err)
	}
	agent, err = cluster.BuildBinary(t.TempDir(), "./cmd/nodeagent", "")
	if err != nil {
		t.Fatal(err)
	}
	return tools.Etcd, filepath.Join(tools.KubeDir, "kube-apiserver"), agent
}

// firstGPU is the UUID of GPU 0, as the device plugin would report it to the kubelet.
func firstGPU(t *testing.T) string {
	t.Helper()
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("NVML init: %v", ret)
	}
	defer lib.Shutdown()
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("GPU 0: %v", ret)
	}
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		t.Fatalf("GPU 0 UUID: %v", ret)
	}
	return uuid
}

// podResources plays the kubelet: the pod's container holds GPU 0.
type podResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	uuid string
}

func (p *podResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{
		Name: podName, Namespace: metav1.NamespaceDefault,
		Containers: []*podresourcesapi.ContainerResources{{Name: "worker", Devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: v1alpha1.ResourceGPU, DeviceIds: []string{p.uuid}},
		}}},
	}}}, nil
}

func servePodResources(t *testing.T, uuid string) string {
	t.Helper()
	l, socket := listenUnix(t)
	s := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(s, &podResources{uuid: uuid})
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return socket
}

func waitHealthy(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("agent not healthy: %v", err)
	}
}

// memory is a process's resident set.
func memory(t *testing.T, pid int) procstat.Memory {
	t.Helper()
	m, err := procstat.ReadMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// metric returns the lines of one metric family from the agent's /metrics.
func metric(ctx context.Context, t *testing.T, addr, name string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, name+"_sum") || strings.HasPrefix(l, name+"_count") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}
