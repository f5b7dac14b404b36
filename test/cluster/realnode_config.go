package cluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
)

// The configuration files of a real node: containerd's, the CNI network's and the kubelet's,
// and CoreDNS's Corefile. Settings that matter on this kind of machine are explained where
// they are set (shared/REAL_NODES.md has the evidence).

// containerdConfig is containerd 2.x's configuration (version 3) for node n.
func containerdConfig(n *RealNode, cniBinDir string) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    # No registry is reachable: the sandbox image is the one the harness imported.
    sandbox = %[5]q
  [plugins."io.containerd.cri.v1.images".registry]
    # A registry's hosts.toml (RealNodes.UseRegistry): a loopback registry of the test's,
    # over plain HTTP. Read at every pull: one can be added to running nodes.
    config_path = %[9]q

[plugins."io.containerd.cri.v1.runtime"]
  # The machine withholds CAP_SYS_RESOURCE: runc cannot lower oom_score_adj, and every
  # sandbox fails with "can't get final child's PID from pipe: EOF" unless it is restricted.
  restrict_oom_score_adj = true
  # Each node's network namespaces under its own state, not /var/run/netns.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        # The kubelet's cgroup driver is cgroupfs.
        SystemdCgroup = false
        BinaryName = "runc"
        Root = %[6]q
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  # kubectl exec/attach/port-forward stream through here; loopback, any free port.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

# NRI's socket is one path for the whole machine (/var/run/nri/nri.sock).
[plugins."io.containerd.nri.v1.nri"]
  disable = true
`, n.dir("containerd", "root"), n.dir("containerd", "state"), n.ContainerdSocket, n.ContainerdSocket+".ttrpc",
		PauseImage, n.dir("runc"), cniBinDir, n.dir("cni", "conf"), n.dir("certs.d"))
}

// registryHosts is containerd's hosts.toml for a registry at host (127.0.0.1:PORT) that
// serves plain HTTP: pull and resolve there, nowhere else.
func registryHosts(host string) string {
	return fmt.Sprintf(`server = "http://%[1]s"

[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`, host)
}

// cniConfig is the pod network of node n: the instance's one bridge, shared by every real
// node, with host-local addresses from the node's own slice of the instance's subnet. The
// bridge is no gateway and masquerades nothing, and the pods get no default route: pods
// reach each other, CoreDNS and the host's addresses on the bridge, and nothing else, with
// ip_forward and iptables left alone.
func cniConfig(n *RealNode, net *podNetwork) ([]byte, error) {
	first, last := net.nodeRange(n.Index)
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       net.bridge,
		"plugins": []any{
			map[string]any{
				"type":             "bridge",
				"bridge":           net.bridge,
				"isGateway":        false,
				"isDefaultGateway": false,
				"ipMasq":           false,
				"hairpinMode":      false,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": n.dir("cni", "ipam"),
					"ranges": [][]map[string]string{{{
						"subnet":     net.subnet.String(),
						"rangeStart": first.String(),
						"rangeEnd":   last.String(),
					}}},
					// The API server's Service address (KUBERNETES_SERVICE_HOST in every pod)
					// is the host's, on the bridge (serviceProxy): in-cluster clients reach it.
					"routes": []map[string]string{{"dst": netip.PrefixFrom(apiServiceIP, 32).String(), "gw": net.dnsIP().String()}},
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// kubeletConfig is node n's KubeletConfiguration, with gates set beyond the kubelet's
// default feature gates.
func kubeletConfig(n *RealNode, spec RealNodeSpec, clientCA string, dnsIP string, gates map[string]bool) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzPort: 0
# The API server reaches the kubelet (logs, exec) with its client certificate; nobody else
# gets in.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[3]q}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%[4]s
imageServiceEndpoint: unix://%[4]s
cgroupDriver: cgroupfs
cgroupRoot: /%[5]s
cgroupsPerQOS: true
# Kubernetes 1.35+ refuses cgroup v1 unless told otherwise (config file only, no flag).
failCgroupV1: false
failSwapOn: false
# Else the kubelet adds its chains to the host's iptables.
makeIPTablesUtilChains: false
# The standard path, a bind mount of the node's own directory in its mount namespace: the
# runtime names each container's log by it, and a node agent's pod mounts it from the node.
podLogsDir: /var/log/pods
volumePluginDir: %[6]q
clusterDNS: [%[7]s]
clusterDomain: cluster.local
# The pods' resolver gets the cluster's DNS only, none of the host's search domains.
resolvConf: ""
hairpinMode: none
serializeImagePulls: false
# The images cannot be pulled again: never collect them, and never evict for the disk or
# memory of a machine that the tests share.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "0%%", imagefs.available: "0%%", nodefs.inodesFree: "0%%"}
# Graceful node shutdown through logind's stand-in on the node's bus (login1sim).
shutdownGracePeriod: %[8]s
shutdownGracePeriodCriticalPods: %[9]s
# The kubelet looks at its node's status every this often and writes it when it changed
# (10s by default): the device plugin's GPUs reach the Node's allocatable, and a cancelled
# shutdown its Ready condition, within a second instead of ten.
nodeStatusUpdateFrequency: 1s
%[10]s%[12]sfeatureGates: {%[11]s}
`, n.IP, n.kubeletPort, clientCA, n.ContainerdSocket, n.cgroup, n.dir("volume-plugins"),
		dnsIP, spec.ShutdownGracePeriod, spec.ShutdownGracePeriodCriticalPods, registerTaints(spec), featureGates(gates), kubeletTracing(spec))
}

// kubeletTracing is the kubelet's tracing configuration (GA since 1.34): every span to the
// spec's endpoint, or none.
func kubeletTracing(spec RealNodeSpec) string {
	if spec.TracingEndpoint == "" {
		return ""
	}
	return fmt.Sprintf("tracing: {endpoint: %q, samplingRatePerMillion: 1000000}\n", spec.TracingEndpoint)
}

// registerTaints is the kubelet's registerWithTaints: TaintRealNode unless the spec says the
// nodes are the cluster's only ones (Untainted).
func registerTaints(spec RealNodeSpec) string {
	if spec.Untainted {
		return ""
	}
	return fmt.Sprintf("registerWithTaints:\n- {key: %q, value: \"true\", effect: NoSchedule}\n", TaintRealNode)
}

// featureGates is gates as the inside of a YAML flow mapping, in name order.
func featureGates(gates map[string]bool) string {
	var kv []string
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		kv = append(kv, fmt.Sprintf("%s: %t", name, gates[name]))
	}
	return strings.Join(kv, ", ")
}

// corefile serves cluster.local from the API server on the host's address of the bridge, the
// address that every pod's resolv.conf names.
func corefile(dnsIP, kubeconfig string) string {
	return fmt.Sprintf(`cluster.local:53 {
    bind %s
    errors
    kubernetes cluster.local {
        kubeconfig %s
        ttl 1
    }
}
`, dnsIP, kubeconfig)
}

// realNodeKwokctlConfig is the part of kwokctl's configuration that real nodes need:
// kube-apiserver reaches kubelets at their InternalIP (they have no resolvable name) with the
// cluster's admin certificate, which the kubelets trust (their client CA is the cluster's);
// and the kwok controller manages only the nodes annotated as kwok's (kwokctl's binary
// runtime otherwise has it manage every node, and it would write the real nodes' status and
// play its pod stages on their pods).
//
// The Service network is pinned to kube-apiserver's default, and the API server's certificate
// names the `kubernetes` Service's address: pods on real nodes reach the API server there,
// as in-cluster clients do (serviceProxy).
func realNodeKwokctlConfig(pkiDir string) string {
	return fmt.Sprintf(`- name: kube-apiserver
  extraArgs:
  - {key: service-cluster-ip-range, value: %[4]q}
  - {key: kubelet-preferred-address-types, value: InternalIP}
  - {key: kubelet-client-certificate, value: %[1]q}
  - {key: kubelet-client-key, value: %[2]q}
- name: kwok-controller
  extraArgs:
  - {key: manage-all-nodes, value: "false", override: true}
  - {key: manage-nodes-with-annotation-selector, value: "%[3]s=fake"}
`, filepath.Join(pkiDir, "admin.crt"), filepath.Join(pkiDir, "admin.key"), AnnotationKwokNode, serviceNetwork)
}
