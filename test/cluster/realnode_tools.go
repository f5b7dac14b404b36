package cluster

// RealNodeTools are the binaries of the real nodes that hack/build-tools.sh builds (the
// kubelet is in Tools.KubeDir, beside the control plane).
type RealNodeTools struct {
	// ContainerdDir holds containerd, containerd-shim-runc-v2 and ctr.
	ContainerdDir string
	// CoreDNS is the DNS server of the pods.
	CoreDNS string
}

// realNodeToolNames are build-tools.sh's names for them (its "real-nodes" set).
var realNodeToolNames = []string{"kubelet", "containerd", "coredns"}

// FindRealNodeTools makes sure the real nodes' binaries exist, building any that are
// missing, and returns their paths.
func FindRealNodeTools(root string) (RealNodeTools, error) {
	paths, err := buildTools(root, "the real nodes' binaries", realNodeToolNames...)
	if err != nil {
		return RealNodeTools{}, err
	}
	return RealNodeTools{ContainerdDir: paths["CONTAINERD_BIN_DIR"], CoreDNS: paths["COREDNS_BIN"]}, nil
}
