package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

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
	script := filepath.Join(root, "hack", "build-tools.sh")
	build := exec.Command(script, realNodeToolNames...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return RealNodeTools{}, fmt.Errorf("build the real nodes' binaries with %s: %w", script, err)
	}
	out, err := exec.Command(script, "paths").Output()
	if err != nil {
		return RealNodeTools{}, fmt.Errorf("%s paths: %w", script, err)
	}
	paths := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			paths[k] = v
		}
	}
	return RealNodeTools{ContainerdDir: paths["CONTAINERD_BIN_DIR"], CoreDNS: paths["COREDNS_BIN"]}, nil
}
