// Package agentlease is the node agent's heartbeat: a coordination.k8s.io Lease per node in
// the agent's namespace, named as the node, which the agent renews while it runs, as the
// kubelet renews its node's Lease in kube-node-lease. The controller reads there whether an
// agent is on a node now, rather than whether one once said so:
//
//   - a node whose kubelet is unreachable while its agent still renews is a kubelet that
//     restarts or a late heartbeat, not a lost machine (exitclass, NodeLost);
//   - a node whose agent is silent has nobody to stop its workers or open their barriers:
//     it restarts nothing in place.
//
// The agent's Lease is apart from the kubelet's on purpose: two processes gone silent at once
// is a dead or cut-off node; one is not. Renewing costs one write per node per
// RenewInterval (a 1,000-node cluster: 100 writes a second, as many as its kubelets' own
// Leases cost). Pure: building and reading the object; the agent writes it.
package agentlease

import (
	"encoding/json"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

const (
	// Namespace holds the heartbeats: the agent's own.
	Namespace = v1alpha1.NodeAgentNamespace
	// RenewInterval is how often an agent renews its heartbeat, and Duration how long one
	// renewal holds: four renewals, as the kubelet's node Lease (10 s, 40 s), so that a
	// renewal or two lost to a busy API server do not make a live agent look gone.
	RenewInterval = 10 * time.Second
	Duration      = 4 * RenewInterval
)

// Name is the heartbeat Lease of node's agent.
func Name(node string) string { return node }

// Labels mark a Lease as an agent's heartbeat.
func Labels() map[string]string {
	return map[string]string{v1alpha1.LabelAppName: v1alpha1.NodeAgentHeartbeat}
}

// New is node's heartbeat, renewed at now.
func New(node string, now time.Time, d time.Duration) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: Name(node), Namespace: Namespace, Labels: Labels()}}
	Renew(l, node, now, d)
	return l
}

// Renew renews l, node's heartbeat, at now: it holds for d.
func Renew(l *coordinationv1.Lease, node string, now time.Time, d time.Duration) {
	l.Spec.HolderIdentity = ptr.To(node)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(d / time.Second))
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	if l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = l.Spec.RenewTime
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	for k, v := range Labels() {
		l.Labels[k] = v
	}
}

// Heartbeat reads l as node's heartbeat; nil when it is none (another Lease, another holder,
// or never renewed).
func Heartbeat(l *coordinationv1.Lease, node string) *exitclass.Heartbeat {
	if l == nil || l.Name != Name(node) || l.Labels[v1alpha1.LabelAppName] != v1alpha1.NodeAgentHeartbeat ||
		ptr.Deref(l.Spec.HolderIdentity, "") != node || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return nil
	}
	return &exitclass.Heartbeat{
		RenewedAt: l.Spec.RenewTime.Time,
		Duration:  time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second,
	}
}

// NoGPUMonitoring is why node's agent says on its heartbeat l that it does not watch its
// node's GPUs ("" when it does, or says nothing): Heartbeat.NoGPUMonitoring. Apart from
// Heartbeat, which the in-place waits read for every pod: only the node's facts need it, and
// it parses the capabilities.
func NoGPUMonitoring(l *coordinationv1.Lease, node string) string {
	if caps := Capabilities(l, node); caps != nil && !caps.GPUMonitoring.Enabled {
		return caps.GPUMonitoring.Reason + ": " + caps.GPUMonitoring.Message
	}
	return ""
}

// Capabilities are what node's agent says it can do on its heartbeat l
// (v1alpha1.AnnotationAgentCapabilities); nil when l is not node's heartbeat, or says
// nothing (an agent from before capabilities) or nothing that parses.
func Capabilities(l *coordinationv1.Lease, node string) *v1alpha1.AgentCapabilities {
	if l == nil || l.Name != Name(node) || ptr.Deref(l.Spec.HolderIdentity, "") != node {
		return nil
	}
	raw, ok := l.Annotations[v1alpha1.AnnotationAgentCapabilities]
	if !ok {
		return nil
	}
	caps := &v1alpha1.AgentCapabilities{}
	if json.Unmarshal([]byte(raw), caps) != nil {
		return nil
	}
	return caps
}

// SetCapabilities writes caps on l, its node's heartbeat; it reports whether that changed l.
func SetCapabilities(l *coordinationv1.Lease, caps v1alpha1.AgentCapabilities) (bool, error) {
	raw, err := json.Marshal(caps)
	if err != nil {
		return false, err
	}
	if l.Annotations[v1alpha1.AnnotationAgentCapabilities] == string(raw) {
		return false, nil
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[v1alpha1.AnnotationAgentCapabilities] = string(raw)
	return true, nil
}

// Alive reports whether hb says an agent is there at now: it renewed within its duration.
func Alive(hb *exitclass.Heartbeat, now time.Time) bool {
	return hb != nil && now.Before(hb.ExpiresAt())
}

// Records are the barrier records that node's agent keeps on its heartbeat l
// (v1alpha1.AnnotationBarrierRecords), by pod UID: none when l is not node's heartbeat, or
// they do not parse. Only a pod of node is to be read with its record (attempt.WithRecord):
// the agent of a node writes only that node's Lease, and records only its own pods.
func Records(l *coordinationv1.Lease, node string) map[types.UID]v1alpha1.BarrierRecord {
	if Heartbeat(l, node) == nil {
		return nil
	}
	raw, ok := l.Annotations[v1alpha1.AnnotationBarrierRecords]
	if !ok {
		return nil
	}
	recs := map[types.UID]v1alpha1.BarrierRecord{}
	if json.Unmarshal([]byte(raw), &recs) != nil {
		return nil
	}
	return recs
}

// SetRecords makes recs the barrier records on l, its node's heartbeat; none removes them.
func SetRecords(l *coordinationv1.Lease, recs map[types.UID]v1alpha1.BarrierRecord) error {
	if len(recs) == 0 {
		delete(l.Annotations, v1alpha1.AnnotationBarrierRecords)
		return nil
	}
	raw, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[v1alpha1.AnnotationBarrierRecords] = string(raw)
	return nil
}

// WithRecords is pods as the controller reads them: each with the record its node's agent
// keeps on its heartbeat where that is later than its own (attempt.WithRecord); lease gives a
// node's heartbeat, nil if none. pods is changed in place (a pod with a later record is a
// copy: the pods read are never written).
func WithRecords(pods []*corev1.Pod, lease func(node string) *coordinationv1.Lease) []*corev1.Pod {
	byNode := map[string]map[types.UID]v1alpha1.BarrierRecord{}
	for i, p := range pods {
		node := p.Spec.NodeName
		if node == "" {
			continue
		}
		recs, read := byNode[node]
		if !read {
			recs = Records(lease(node), node)
			byNode[node] = recs
		}
		if rec, ok := recs[p.UID]; ok {
			pods[i] = attempt.WithRecord(p, &rec)
		}
	}
	return pods
}
