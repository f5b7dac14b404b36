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

// Tools are the paths of the pinned binaries that hack/build-tools.sh builds.
type Tools struct {
	// Root is the repository root.
	Root string
	// Etcd is the etcd binary.
	Etcd string
	// KubeDir holds kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet
	// of the Kubernetes the cluster runs: the newest pinned release, or the oldest supported
	// (Options.Oldest).
	KubeDir string
	// Kwok and Kwokctl are kwok's binaries.
	Kwok, Kwokctl string

	// kubectl is the newest pinned kubectl, which serves both releases (kubectl supports
	// one minor version of skew either way).
	kubectl string
	// oldestKubeDir holds the oldest supported release's control plane and kubelet
	// (hack/tools/kubernetes-oldest), built only for a cluster that asks for it.
	oldestKubeDir string
}

// KubernetesVersion is the version of the control plane and kubelet in KubeDir (its name is
// kubernetes-<version>, hack/build-tools.sh).
func (t Tools) KubernetesVersion() string {
	return strings.TrimPrefix(filepath.Base(t.KubeDir), "kubernetes-")
}

// Kubectl is the path of the pinned kubectl.
func (t Tools) Kubectl() string { return t.kubectl }

// Oldest is t with the control plane and the kubelet of the oldest Kubernetes the default
// installation supports, built if missing.
func (t Tools) Oldest() (Tools, error) {
	if _, err := buildTools(t.Root, "the oldest supported control plane and kubelet", "oldest"); err != nil {
		return Tools{}, err
	}
	t.KubeDir = t.oldestKubeDir
	return t, nil
}

// workdir is where kwokctl keeps its clusters (KWOK_WORKDIR).
func (t Tools) workdir() string { return filepath.Join(t.Root, "_output", "kwok") }

// FindTools locates the repository from the working directory and makes sure the control
// plane binaries exist, building any that are missing (only the first run on a machine pays).
func FindTools() (Tools, error) {
	root, err := repoRoot()
	if err != nil {
		return Tools{}, err
	}
	paths, err := buildTools(root, "control plane binaries", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "kwokctl")
	if err != nil {
		return Tools{}, err
	}
	t := Tools{
		Root:    root,
		Etcd:    paths["ETCD_BIN"],
		KubeDir: paths["KUBE_BIN_DIR"],
		Kwok:    filepath.Join(paths["KWOK_BIN_DIR"], "kwok"),
		Kwokctl: filepath.Join(paths["KWOK_BIN_DIR"], "kwokctl"),

		kubectl:       filepath.Join(paths["KUBE_BIN_DIR"], "kubectl"),
		oldestKubeDir: paths["KUBE_OLDEST_BIN_DIR"],
	}
	return t, nil
}

// buildTools builds the named binaries that are missing with hack/build-tools.sh (what says
// what they are, for its error) and returns the paths it prints (KEY=path).
func buildTools(root, what string, names ...string) (map[string]string, error) {
	script := filepath.Join(root, "hack", "build-tools.sh")
	build := exec.Command(script, names...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build %s with %s: %w", what, script, err)
	}
	out, err := exec.Command(script, "paths").Output()
	if err != nil {
		return nil, fmt.Errorf("%s paths: %w", script, err)
	}
	paths := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			paths[k] = v
		}
	}
	return paths, nil
}

// repoRoot walks up from the working directory to the directory holding hack/build-tools.sh.
// Tests run in their package directory, the demo and benchmarks at the root.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "build-tools.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("faultline repository not found above the working directory (no hack/build-tools.sh)")
		}
		dir = parent
	}
}
