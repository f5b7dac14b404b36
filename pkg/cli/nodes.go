package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/maintenance"
)

// What `launcher nodes` says of a node's agent. The agent's readiness probe passes only
// while it holds logind's delay inhibitor lock (pkg/nodeagent /readyz), so a Ready agent
// pod is the API's evidence of the lock; nothing else about the lock is published.
const (
	// AgentLocked: the agent pod is Ready: it runs and holds the inhibitor lock.
	AgentLocked = "Locked"
	// AgentNoLock: the agent pod runs but is not Ready: no lock (yet), a shutdown would go
	// unseen.
	AgentNoLock = "NoLock"
	// AgentPending: the agent pod is not running yet. A container of it that waits with a
	// reason of the kubelet's (ImagePullBackOff: its image cannot be pulled) is shown by that
	// reason instead, its words in AgentWhy.
	AgentPending = "Pending"
	// AgentNone: no agent pod on the node (not a GPU node the DaemonSet reaches, or the
	// agent is not installed).
	AgentNone = "None"
	// AgentUnknown: the agent's pods could not be read (RBAC).
	AgentUnknown = "<unknown>"
)

// NodeReport is what `launcher nodes` knows of one node; -o json|yaml print a list of them.
type NodeReport struct {
	Name string   `json:"name"`
	GPUs NodeGPUs `json:"gpus"`
	// Agent is one of Agent*; AgentPod names the agent's pod.
	Agent    string `json:"agent"`
	AgentPod string `json:"agentPod,omitempty"`
	// AgentWhy is the kubelet's word on an agent pod that does not run: "ImagePullBackOff:
	// Back-off pulling image ...".
	AgentWhy string `json:"agentWhy,omitempty"`
	// Capabilities are what the agent says on its heartbeat it can see and do on the node
	// (nil: it says nothing, or its heartbeat could not be read).
	Capabilities *v1alpha1.AgentCapabilities `json:"capabilities,omitempty"`
	// ShutdownAnnouncedAt is the node agent's faultline.dev/shutdown-detected-at.
	ShutdownAnnouncedAt *metav1.Time `json:"shutdownAnnouncedAt,omitempty"`
	Cordoned            bool         `json:"cordoned"`
	// Maintenance is why the node is under maintenance now, as the controller reads it.
	Maintenance []NodeSignal `json:"maintenance,omitempty"`
	// ScheduledMaintenance is when a maintenance announced by the platform (GKE's label)
	// starts, if it is not acted on yet.
	ScheduledMaintenance *metav1.Time `json:"scheduledMaintenance,omitempty"`
	// Runs are the runs whose current attempt has workers on the node; RunsUnknown is true
	// when they could not be read (RBAC), which is not the same as none.
	Runs        []NodeRun `json:"runs,omitempty"`
	RunsUnknown bool      `json:"runsUnknown,omitempty"`
}

// NodeGPUs are a node's GPUs: Total is its nvidia.com/gpu capacity, Healthy what the device
// plugin still offers (allocatable: it withdraws the GPUs it finds unhealthy), and the node
// agent's GPUHealthy condition (Condition "" when the agent never wrote it).
type NodeGPUs struct {
	Healthy   int64        `json:"healthy"`
	Total     int64        `json:"total"`
	Condition string       `json:"condition,omitempty"`
	Reason    string       `json:"reason,omitempty"`
	Since     *metav1.Time `json:"since,omitempty"`
}

// NodeSignal is one reason a node is under maintenance (maintenance.Signal).
type NodeSignal struct {
	Source string `json:"source"`
	Name   string `json:"name,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// NodeRun is a run with workers on a node.
type NodeRun struct {
	Namespace string  `json:"namespace"`
	Name      string  `json:"name"`
	Attempt   int32   `json:"attempt"`
	Indexes   []int32 `json:"indexes"`
	// Coordinator is true when index 0, the framework's coordinator, is on the node.
	Coordinator bool `json:"coordinator"`
	// Blocked is the reason a drain of the node cannot move the run (no placement left for
	// the gang), from the NodeMaintenance that holds the node.
	Blocked string `json:"blocked,omitempty"`
}

// NodeInputs are what NodeReports reads; Workers and Runs nil means the runs could not
// be read, AgentPods nil the agent's pods.
type NodeInputs struct {
	Nodes     []corev1.Node
	Workers   []corev1.Pod
	Runs      []v1alpha1.TrainingRun
	AgentPods []corev1.Pod
	// Heartbeats are the node agents' heartbeat Leases (package agentlease).
	Heartbeats   []coordinationv1.Lease
	Maintenances []v1alpha1.NodeMaintenance
	Config       maintenance.Config
	Now          time.Time
}

// NodeReports builds one report per node, sorted by name. It calls no API: the command
// lists, this decides what each node shows.
func NodeReports(in NodeInputs) []NodeReport {
	runsKnown := in.Workers != nil && in.Runs != nil
	runs := map[string]*v1alpha1.TrainingRun{}
	for i := range in.Runs {
		r := &in.Runs[i]
		runs[r.Namespace+"/"+r.Name] = r
	}
	onNode := map[string][]*corev1.Pod{}
	for i := range in.Workers {
		p := &in.Workers[i]
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			onNode[p.Spec.NodeName] = append(onNode[p.Spec.NodeName], p)
		}
	}
	agents := map[string]*corev1.Pod{}
	for i := range in.AgentPods {
		p := &in.AgentPods[i]
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			agents[p.Spec.NodeName] = p
		}
	}
	heartbeats := map[string]*coordinationv1.Lease{}
	for i := range in.Heartbeats {
		heartbeats[in.Heartbeats[i].Name] = &in.Heartbeats[i]
	}
	out := make([]NodeReport, 0, len(in.Nodes))
	for i := range in.Nodes {
		n := &in.Nodes[i]
		facts := exitclass.FactsOfNode(n, nil)
		r := NodeReport{Name: n.Name, GPUs: gpusOf(n), Cordoned: maintenance.Cordoned(n), RunsUnknown: !runsKnown}
		if t := facts.ShutdownDetectedAt; t != nil {
			r.ShutdownAnnouncedAt = &metav1.Time{Time: *t}
		}
		r.Agent, r.AgentPod, r.AgentWhy = agentOf(agents[n.Name], in.AgentPods != nil)
		r.Capabilities = agentlease.Capabilities(heartbeats[agentlease.Name(n.Name)], n.Name)
		active, next := maintenance.Of(n, in.Maintenances, in.Config, in.Now)
		for _, s := range active {
			r.Maintenance = append(r.Maintenance, NodeSignal{Source: s.Source, Name: s.Name, Reason: s.Reason})
		}
		if !next.IsZero() {
			if secs, err := strconv.ParseInt(n.Labels[v1alpha1.LabelGKEScheduledMaintenanceTime], 10, 64); err == nil {
				r.ScheduledMaintenance = &metav1.Time{Time: time.Unix(secs, 0)}
			}
		}
		if runsKnown {
			gov := maintenance.Governing(n, n.Name, in.Maintenances)
			for _, h := range maintenance.Hits(onNode[n.Name], runs, []string{n.Name}) {
				nr := NodeRun{Namespace: h.Namespace, Name: h.Name, Attempt: h.Attempt, Indexes: h.Indexes, Coordinator: h.Coordinator}
				if gov != nil {
					for _, e := range gov.Status.Runs {
						if e.Namespace == h.Namespace && e.Name == h.Name && e.Attempt == h.Attempt && !e.Feasible {
							nr.Blocked = e.Message
						}
					}
				}
				r.Runs = append(r.Runs, nr)
			}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func gpusOf(n *corev1.Node) NodeGPUs {
	g := NodeGPUs{}
	if q, ok := n.Status.Capacity[v1alpha1.ResourceGPU]; ok {
		g.Total = q.Value()
	}
	if q, ok := n.Status.Allocatable[v1alpha1.ResourceGPU]; ok {
		g.Healthy = q.Value()
	} else {
		g.Healthy = g.Total
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1alpha1.NodeConditionGPUHealthy {
			g.Condition, g.Reason = string(c.Status), c.Reason
			if !c.LastTransitionTime.IsZero() {
				g.Since = c.LastTransitionTime.DeepCopy()
			}
			if c.Status == corev1.ConditionFalse {
				// The agent found a fatal fault: the node's GPUs are not to be trusted,
				// whatever the device plugin still offers.
				g.Healthy = 0
			}
		}
	}
	return g
}

func agentOf(p *corev1.Pod, known bool) (state, pod, why string) {
	switch {
	case !known:
		return AgentUnknown, "", ""
	case p == nil:
		return AgentNone, "", ""
	case p.Status.Phase != corev1.PodRunning:
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
				return w.Reason, p.Name, w.Reason + ": " + w.Message
			}
		}
		return AgentPending, p.Name, ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return AgentLocked, p.Name, ""
		}
	}
	return AgentNoLock, p.Name, ""
}

// NodeList is what -o json|yaml print.
type NodeList struct {
	Kind  string       `json:"kind"`
	Items []NodeReport `json:"items"`
}

// PrintNodes writes the reports as f says (table, wide, json or yaml).
func PrintNodes(w io.Writer, reports []NodeReport, f Format, now time.Time) error {
	switch f {
	case FormatJSON, FormatYAML:
		if reports == nil {
			reports = []NodeReport{}
		}
		return writeObject(w, NodeList{Kind: "NodeReportList", Items: reports}, f)
	case FormatName:
		for _, r := range reports {
			fmt.Fprintf(w, "node/%s\n", r.Name)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	header := []string{"NAME", "GPUS", "GPU-HEALTH", "GPU-MONITOR", "AGENT", "SHUTDOWN", "CORDONED", "MAINTENANCE", "RUNS"}
	if f == FormatWide {
		header = append(header, "AGENT-POD", "AGENT-CANNOT", "MAINTENANCE-REASON")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range reports {
		shutdown := none
		if r.ShutdownAnnouncedAt != nil {
			shutdown = age(*r.ShutdownAnnouncedAt, now) + " ago"
		}
		row := []string{
			r.Name,
			fmt.Sprintf("%d/%d", r.GPUs.Healthy, r.GPUs.Total),
			gpuHealth(r.GPUs, now),
			gpuMonitor(r.Capabilities),
			r.Agent,
			shutdown,
			yesNo(r.Cordoned),
			maintenanceCell(r, now),
			runsCell(r),
		}
		if f == FormatWide {
			var reasons []string
			for _, s := range r.Maintenance {
				if s.Reason != "" {
					reasons = append(reasons, s.Reason)
				}
			}
			if r.AgentWhy != "" {
				reasons = append([]string{"agent: " + r.AgentWhy}, reasons...)
			}
			row = append(row, orNone(r.AgentPod), agentCannot(r.Capabilities), orNone(strings.Join(reasons, "; ")))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// gpuMonitor is "on", "off (NVMLNotFound)", or <unknown> where the agent says nothing.
func gpuMonitor(c *v1alpha1.AgentCapabilities) string {
	switch {
	case c == nil:
		return "<unknown>"
	case c.GPUMonitoring.Enabled:
		return "on"
	}
	return "off (" + c.GPUMonitoring.Reason + ")"
}

// agentCannot names what the agent says it cannot do on the node, each with why: "<none>"
// when it can do all it does there (what it does not do at all, NotSupported, is no lack:
// DRA on simulated hardware).
func agentCannot(c *v1alpha1.AgentCapabilities) string {
	if c == nil {
		return "<unknown>"
	}
	var out []string
	for _, x := range []struct {
		name string
		c    v1alpha1.Capability
	}{
		{"gpu-monitoring", c.GPUMonitoring}, {"shutdown-lock", c.ShutdownLock}, {"in-place", c.InPlace},
		{"pod-resources", c.PodResources}, {"dra", c.DRA},
	} {
		if x.c.Enabled || x.c.Reason == v1alpha1.CapabilityNotSupported {
			continue
		}
		s := x.name + ": " + x.c.Reason
		if x.c.Message != "" {
			s += ": " + x.c.Message
		}
		out = append(out, s)
	}
	return orNone(strings.Join(out, "; "))
}

// gpuHealth is "Healthy", "Xid79 for 5m", or <unknown> before the agent wrote anything.
func gpuHealth(g NodeGPUs, now time.Time) string {
	switch g.Condition {
	case "":
		return "<unknown>"
	case string(corev1.ConditionTrue):
		return "Healthy"
	}
	s := orNone(g.Reason)
	if g.Since != nil {
		s += " for " + age(*g.Since, now)
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// maintenanceCell names each signal: the NodeMaintenance by name, a platform signal by
// its source, a scheduled one by when it starts.
func maintenanceCell(r NodeReport, now time.Time) string {
	var parts []string
	for _, s := range r.Maintenance {
		switch s.Source {
		case maintenance.SourceNodeMaintenance:
			parts = append(parts, "nodemaintenance/"+s.Name)
		case maintenance.SourceCondition:
			parts = append(parts, "condition "+s.Name)
		default:
			parts = append(parts, s.Source)
		}
	}
	if t := r.ScheduledMaintenance; t != nil {
		parts = append(parts, "GKE in "+duration.HumanDuration(t.Sub(now)))
	}
	if len(parts) == 0 {
		return none
	}
	return strings.Join(parts, ",")
}

// runsCell is "ns/run#2[0,1]*" per run: attempt after #, indexes in brackets, * when the
// coordinator (index 0) is there, "BLOCKED" when a drain cannot move it.
func runsCell(r NodeReport) string {
	if r.RunsUnknown {
		return "<unknown>"
	}
	if len(r.Runs) == 0 {
		return none
	}
	var parts []string
	for _, x := range r.Runs {
		idx := make([]string, len(x.Indexes))
		for i, v := range x.Indexes {
			idx[i] = strconv.Itoa(int(v))
		}
		s := fmt.Sprintf("%s/%s#%d[%s]", x.Namespace, x.Name, x.Attempt, strings.Join(idx, ","))
		if x.Coordinator {
			s += "*"
		}
		if x.Blocked != "" {
			s += " BLOCKED"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// Blocked lists the runs that a drain of the reports' nodes cannot move, for a note under
// the table.
func Blocked(reports []NodeReport) []string {
	var out []string
	for _, r := range reports {
		for _, x := range r.Runs {
			if x.Blocked != "" {
				line := fmt.Sprintf("%s/%s on %s: %s", x.Namespace, x.Name, r.Name, x.Blocked)
				if !slices.Contains(out, line) {
					out = append(out, line)
				}
			}
		}
	}
	return out
}

// ReadNodes lists what NodeReports needs: the nodes that selector picks, the runs' workers
// and runs of every namespace, the node agent's pods and the NodeMaintenances. What RBAC
// forbids (an SRE's faultline-sre role reads no pods) is left nil with a warning: the
// reports say <unknown> there rather than "none".
func ReadNodes(ctx context.Context, cl *Clients, selector string, now time.Time) (NodeInputs, []string, error) {
	in := NodeInputs{Config: maintenance.DefaultConfig(), Now: now}
	nodes, err := cl.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		if apierrors.IsBadRequest(err) {
			return in, nil, UsageError("-l %q: %v", selector, err)
		}
		return in, nil, fmt.Errorf("list nodes: %w", err)
	}
	in.Nodes = nodes.Items
	var warnings []string
	forbidden := func(what, why string, err error) error {
		if apierrors.IsForbidden(err) {
			warnings = append(warnings, fmt.Sprintf("%s not shown: %s (%v)", what, why, apierrors.ReasonForError(err)))
			return nil
		}
		return err
	}
	workers, err := cl.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun})
	if err == nil {
		in.Workers = workers.Items
		if in.Workers == nil {
			in.Workers = []corev1.Pod{}
		}
		var runs []v1alpha1.TrainingRun
		runs, err = (&Runs{REST: cl.Runs.REST}).List(ctx)
		in.Runs = runs
		if err == nil && in.Runs == nil {
			in.Runs = []v1alpha1.TrainingRun{}
		}
	}
	if err != nil {
		in.Workers, in.Runs = nil, nil
		if err := forbidden("runs on the nodes", "listing pods and trainingruns in every namespace is not allowed to you; `launcher drain --dry-run NODE` shows the runs a drain hits", err); err != nil {
			return in, nil, fmt.Errorf("list the runs' workers: %w", err)
		}
	}
	agents, err := cl.Kube.CoreV1().Pods(v1alpha1.NodeAgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelAppName + "=" + v1alpha1.NodeAgentName})
	switch {
	case err == nil:
		in.AgentPods = agents.Items
		if in.AgentPods == nil {
			in.AgentPods = []corev1.Pod{}
		}
	default:
		if err := forbidden("node agents", "listing pods in "+v1alpha1.NodeAgentNamespace+" is not allowed to you", err); err != nil {
			return in, nil, fmt.Errorf("list the node agent's pods: %w", err)
		}
	}
	leases, err := cl.Kube.CoordinationV1().Leases(agentlease.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(agentlease.Labels()).String()})
	switch {
	case err == nil:
		in.Heartbeats = leases.Items
	default:
		if err := forbidden("what the node agents can do", "listing leases in "+agentlease.Namespace+" is not allowed to you", err); err != nil {
			return in, nil, fmt.Errorf("list the node agents' heartbeats: %w", err)
		}
	}
	nms, err := (&Maintenances{REST: cl.Runs.REST}).List(ctx)
	if err != nil {
		if err := forbidden("NodeMaintenances", "listing nodemaintenances is not allowed to you (the faultline-sre ClusterRole grants it)", err); err != nil {
			return in, nil, err
		}
	}
	in.Maintenances = nms
	return in, warnings, nil
}
