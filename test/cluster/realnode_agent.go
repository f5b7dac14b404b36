package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// agentLockWho is who the node agent says it is when it takes its inhibitor lock
// (pkg/shutdown); the kubelet's lock on the same logind says "kubelet".
const agentLockWho = "faultline-nodeagent"

// AgentLockWho is who a node agent says it is on logind (RealNode.WaitLock).
const AgentLockWho = agentLockWho

// StartRealNodeAgent starts a node agent for a real node, as StartAgent does for a kwok one
// but with the node's own system bus (the kubelet's logind is the agent's), the kubelet's
// PodResources socket, and NVML simulated with the UUIDs of the node's fake GPUs
// (--simulate-gpus: the device plugin's and the DRA driver's), so that a GPU fault names a
// device the kubelet really allocated. It runs in the node's mount namespace. o.Node and
// o.InhibitDelayMax are ignored (the node's own hold). It returns once the agent holds its inhibitor lock; stop it with Stop (the node's
// bus and logind stay).
func (c *Cluster) StartRealNodeAgent(ctx context.Context, n *RealNode, o AgentOptions) (a *Agent, err error) {
	if o.DaemonSetPod == nil {
		return nil, fmt.Errorf("no agent DaemonSet pod for node %s", n.Name)
	}
	a = &Agent{Node: n.Name, done: make(chan struct{})}
	defer func() {
		if err != nil {
			a.Stop()
		}
	}()
	kubeconfig, token, err := c.PodBoundKubeconfig(ctx, o.DaemonSetPod, o.Dir)
	if err != nil {
		return nil, err
	}
	a.Token = token
	// In the node's directory, whose logs the cluster saves when a test fails (SaveLogs).
	// Appended to: an agent restarted after a node shutdown keeps its predecessor's lines.
	a.LogPath = n.dir("nodeagent.log")
	logFile, err := os.OpenFile(a.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := []string{"--kubeconfig", kubeconfig, "--node-name", n.Name,
		"--dbus-address", n.Bus.Address, "--pod-resources-socket", n.PodResourcesSocket,
		"--cri-endpoint", "unix://" + n.ContainerdSocket, "--http-address", anyPort}
	if gpus := n.AllGPUs(); len(gpus) > 0 && !o.RealNVML {
		args = append(args, "--simulate-gpus", strings.Join(gpus, ","), "--simulate-address", anyPort)
	}
	// In the node's mount namespace, as a DaemonSet's pod runs on its node: the paths the
	// runtime reports (a container's log under /var/log/pods) are the node's.
	a.cmd = n.inNamespace(o.Bin, append(args, o.Args...)...)
	a.cmd.Stdout, a.cmd.Stderr = logFile, logFile
	// A test binary that dies must not leave its agents marking a later cluster's pods.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		logFile.Close()
		a.cmd = nil
		return nil, fmt.Errorf("start %s: %w", o.Bin, err)
	}
	go func() {
		_ = a.cmd.Wait()
		logFile.Close()
		close(a.done)
	}()
	// The node's logind also hands locks to the kubelet (which took its own at start):
	// wait for the agent's.
	for {
		select {
		case l := <-n.Logind.Locks():
			if l.Who == agentLockWho {
				a.Lock = l
				return a, a.learnAddresses()
			}
		case <-a.done:
			return nil, fmt.Errorf("node agent for %s exited at start: %s", n.Name, a.Tail(20))
		case <-ctx.Done():
			return nil, fmt.Errorf("node agent for %s took no inhibitor lock: %w", n.Name, ctx.Err())
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("node agent for %s took no inhibitor lock in a minute: %s", n.Name, a.Tail(20))
		}
	}
}

// InjectXIDByUUID makes the agent's simulated GPU of that UUID report an XID.
func (a *Agent) InjectXIDByUUID(uuid string, xid uint64) error {
	return a.simulate(fmt.Sprintf("uuid=%s&xid=%d", uuid, xid))
}

// AgentPodOn waits until the agent DaemonSet has a live pod bound to node and returns it. On
// a real node that pod never runs (its image is in no registry here, and the agent runs as a
// process of the test), but it exists, which is all a token bound to it needs. A pod the
// kubelet stopped (a node shutdown stops them all) is not live: the DaemonSet replaces it.
func (c *Cluster) AgentPodOn(ctx context.Context, node string) (*corev1.Pod, error) {
	sel := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": AgentAppLabel})
	var found *corev1.Pod
	deleted := map[types.UID]bool{}
	_, err := c.WaitPods(ctx, AgentNamespace, sel, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
				continue
			}
			if PodLive(p) {
				found = p
				return true, nil
			}
			// The pod a node shutdown ended: the DaemonSet controller deletes a failed pod
			// (and makes the next) only after a backoff that doubles with each failure on
			// the node, up to 15 minutes; a package that shuts a node down several times
			// would wait longer each time. An operator deletes it, as here.
			if p.Status.Phase == corev1.PodFailed && !deleted[p.UID] {
				deleted[p.UID] = true
				err := c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					return false, fmt.Errorf("delete the failed agent pod %s: %w", p.Name, err)
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("agent DaemonSet pod on %s: %w", node, err)
	}
	return found, nil
}

// simulate posts to the agent's simulation endpoint.
func (a *Agent) simulate(query string) error {
	resp, err := http.Post("http://"+a.SimulateAddr+"/simulate/xid?"+query, "", nil)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("simulate %s on %s: %s: %s", query, a.Node, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
