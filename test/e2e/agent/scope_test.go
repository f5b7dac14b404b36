package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/nodeagent/runwatch"
	"github.com/faultline-dev/faultline/test/cluster"
)

// eventsRuntime is a container runtime that answers the CRI's Version and streams container
// events (none come): enough for the node agent to restart pods in place, as far as it can
// tell at its start.
type eventsRuntime struct{ noEventsRuntime }

func (eventsRuntime) GetContainerEvents(_ *runtimeapi.GetEventsRequest, s runtimeapi.RuntimeService_GetContainerEventsServer) error {
	<-s.Context().Done()
	return nil
}

// TestE2EAgentSeesOnlyItsNode: two node agents that restart pods in place, one on each of
// two nodes, as the API server's audit log records their reads. Each lists and watches only
// its own node's pods (a spec.nodeName field selector) and only the TrainingRuns with pods on
// its node, each run by its namespace and name: the agent of node A watches run "mine" (a
// pod on A) and never reads "theirs" (a pod on B) nor "idle" (no pod anywhere) until a pod
// of "idle" comes to A; once mine's last pod has left A, its watch ends.
//
// It runs alone, before the package's parallel tests and after
// TestE2EAgentWithoutContainerEventsCannotRestartInPlace (its file comes first), which needs
// faultline's CRD absent at its start: this test installs it (again), and it stays.
func TestE2EAgentSeesOnlyItsNode(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.InstallCRDs(ctx, filepath.Join(c.Tools.Root, "deploy", "crd")); err != nil {
		t.Fatal(err)
	}
	runs, err := client.New(c.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mine", "theirs", "idle"} {
		run := &v1alpha1.TrainingRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.TrainingRunSpec{Workers: 1, Framework: v1alpha1.FrameworkNone,
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "trainer:latest"}}}}},
		}
		if err := runs.Create(ctx, run); err != nil {
			t.Fatalf("create TrainingRun %s: %v", name, err)
		}
	}
	nodeA, nodeB := cluster.NodeName(2), cluster.NodeName(4)
	mine := createPods(ctx, t, c, ns, nodeA, "mine", 1, 0)[0]
	createPods(ctx, t, c, ns, nodeB, "theirs", 1, 0)

	// What each agent may read: its node's pods; the runs with pods on its node, each by
	// namespace and name (idle on A only once its pod is there); the probe, which names none.
	allowed := map[string][]string{
		nodeA: {runwatch.Selector("", ""), runwatch.Selector(ns, "mine")},
		nodeB: {runwatch.Selector("", ""), runwatch.Selector(ns, "theirs")},
	}
	// Pods another test left on these nodes (this test's run before, go test -count): their
	// runs are on the agents' nodes too, which they may read.
	for node := range allowed {
		left, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range left.Items {
			if run := p.Labels[v1alpha1.LabelRun]; run != "" {
				allowed[node] = append(allowed[node], runwatch.Selector(p.Namespace, run))
			}
		}
	}
	// A request received before now is no read of this test's agents: another test's
	// agents', or those of this test's run before (go test -count) on the same nodes, whose
	// watches end, and are logged, later.
	audit := &agentAudit{path: c.AuditLog(), ns: ns, allowed: allowed, since: time.Now()}
	sock := serveRuntime(t, eventsRuntime{})
	for _, node := range []string{nodeA, nodeB} {
		startAgent(t, c, node, "--cri-endpoint", "unix://"+sock)
		if _, err := c.WaitNode(ctx, node, func(n *corev1.Node) (bool, error) {
			cond := cluster.NodeCondition(n, v1alpha1.NodeConditionInPlaceReady)
			return cond != nil && cond.Status == corev1.ConditionTrue, nil
		}); err != nil {
			t.Fatalf("node %s: the agent does not restart pods in place, so it watches no run: %v", node, err)
		}
	}
	audit.wait(ctx, t, "the agent of "+nodeA+" watching mine, and that of "+nodeB+" theirs", func() bool {
		return audit.watching(nodeA, "mine") && audit.watching(nodeB, "theirs")
	})
	// A pod of idle comes to A: A watches it from then on.
	allowed[nodeA] = append(allowed[nodeA], runwatch.Selector(ns, "idle"))
	createPods(ctx, t, c, ns, nodeA, "idle", 1, 0)
	audit.wait(ctx, t, "the agent of "+nodeA+" watching idle", func() bool { return audit.watching(nodeA, "idle") })
	// Mine's last pod leaves A: its watch ends.
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, mine.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	audit.wait(ctx, t, "the agent of "+nodeA+" to end its watch of mine", func() bool { return audit.watchEnded(nodeA, "mine") })
	t.Logf("%d reads of pods and runs by the agents of %s and %s, each of its own node's", audit.checked, nodeA, nodeB)
}

// serveRuntime serves rt as a container runtime on a socket of the test's and returns its
// path.
func serveRuntime(t *testing.T, rt runtimeapi.RuntimeServiceServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, rt)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return sock
}

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	Received   time.Time `json:"requestReceivedTimestamp"`
	Stage      string    `json:"stage"`
	RequestURI string    `json:"requestURI"`
	Verb       string    `json:"verb"`
	User       struct {
		Extra map[string][]string `json:"extra"`
	} `json:"user"`
	ObjectRef struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
}

// node is the node of the agent that made the request: its token is bound to its
// DaemonSet pod, which names the node.
func (e *auditEvent) node() string {
	if n := e.User.Extra["authentication.kubernetes.io/node-name"]; len(n) == 1 {
		return n[0]
	}
	return ""
}

func (e *auditEvent) fieldSelector() string {
	u, err := url.Parse(e.RequestURI)
	if err != nil {
		return "<unparsable " + e.RequestURI + ">"
	}
	return u.Query().Get("fieldSelector")
}

// agentAudit reads the agents' requests from the API server's audit log, and checks each
// against what its agent may read (allowed, by node: the field selectors of its reads of
// TrainingRuns) as it comes: a read is checked against what was allowed when it was read.
type agentAudit struct {
	path    string
	ns      string
	allowed map[string][]string
	// since: the events of requests received before are not read.
	since   time.Time
	events  []auditEvent
	checked int
}

// read reads the log's events, and returns what the new ones read that their agent may not.
func (a *agentAudit) read() ([]string, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a.events = a.events[:0]
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", a.path, err)
		}
		if !e.Received.Before(a.since) {
			a.events = append(a.events, e)
		}
	}
	var wrong []string
	for _, e := range a.events[min(a.checked, len(a.events)):] {
		if msg := a.wrong(e); msg != "" {
			wrong = append(wrong, msg)
		}
	}
	a.checked = len(a.events)
	return wrong, sc.Err()
}

// wrong says what e read that its agent may not, "" if nothing.
func (a *agentAudit) wrong(e auditEvent) string {
	node := e.node()
	allowed, ours := a.allowed[node]
	if !ours {
		return "" // an agent of another test, before this one
	}
	sel := e.fieldSelector()
	switch e.ObjectRef.Resource {
	case "pods":
		if want := "spec.nodeName=" + node; sel != want {
			return fmt.Sprintf("the agent of %s: %s %s with field selector %q, want %q (its own node's pods alone)", node, e.Verb, e.RequestURI, sel, want)
		}
	case "trainingruns":
		if e.Verb == "get" { // a barrier's confirmation reads its run by name
			sel = runwatch.Selector(e.ObjectRef.Namespace, e.ObjectRef.Name)
		}
		if !slices.Contains(allowed, sel) {
			return fmt.Sprintf("the agent of %s: %s %s (field selector %q): it may read only the runs with pods on its node, each by name (%q)", node, e.Verb, e.RequestURI, sel, allowed)
		}
	}
	return ""
}

// wait reads the log until ok, or fails the test naming what it waited for, or a read an
// agent may not make.
func (a *agentAudit) wait(ctx context.Context, t *testing.T, what string, ok func() bool) {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond) // a file has nothing to watch
	defer tick.Stop()
	for {
		wrong, err := a.read()
		if len(wrong) > 0 {
			t.Fatalf("waiting for %s:\n%s", what, strings.Join(wrong, "\n"))
		}
		if err == nil && ok() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %s in the audit log %s (%d events read, last error %v)", what, a.path, len(a.events), err)
		case <-tick.C:
		}
	}
}

// watching: the agent of node has started a watch of run name.
func (a *agentAudit) watching(node, name string) bool {
	return slices.ContainsFunc(a.events, func(e auditEvent) bool {
		return e.node() == node && e.Verb == "watch" && e.ObjectRef.Resource == "trainingruns" && e.fieldSelector() == runwatch.Selector(a.ns, name)
	})
}

// watchEnded: a watch of run name by the agent of node has ended.
func (a *agentAudit) watchEnded(node, name string) bool {
	return slices.ContainsFunc(a.events, func(e auditEvent) bool {
		return e.node() == node && e.Verb == "watch" && e.Stage == "ResponseComplete" && e.ObjectRef.Resource == "trainingruns" &&
			e.fieldSelector() == runwatch.Selector(a.ns, name)
	})
}
