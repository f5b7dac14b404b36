// Package cluster runs a real Kubernetes control plane for faultline's tests and demo: etcd,
// kube-apiserver, kube-controller-manager (the real Job controller) and kube-scheduler, built
// at pinned versions by hack/build-tools.sh, with nodes simulated by kwok (kwokctl's binary
// runtime, no container engine needed).
//
// Simulated pods start Running and stay so until a test fails them (FailPod) or completes them
// (CompletePod), through the project's own kwok stages in stages/.
package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

//go:embed stages/*.yaml
var stages embed.FS

// Options shape a cluster.
type Options struct {
	// Name prefixes the cluster's name; a random suffix makes it unique.
	Name string
	// Nodes is the number of fake GPU nodes to create (see NodeSpec).
	Nodes int
	// Node describes the fake nodes; the zero value is DefaultNode.
	Node NodeSpec
	// ControllerManagerQPS, when set, raises kube-controller-manager's client rate limit
	// (kube-api-qps, and twice that as burst). Zero keeps the upstream default (20/30), which
	// dominates pod churn at a few hundred pods; benchmarks state which one they ran with.
	ControllerManagerQPS int
	// SchedulerQPS, when set, raises kube-scheduler's client rate limit (kube-api-qps, and
	// twice that as burst; upstream 50/100): binding is one request per pod, and tens of
	// thousands of pods at 50 a second take a quarter of an hour.
	SchedulerQPS int
	// ExtraArgs are passed to kwokctl as --extra-args (component=key=value).
	ExtraArgs []string
	// AuditPolicy, when set, is the path of a kube-apiserver audit policy; the audit log is
	// written to the cluster's logs directory (audit.log), which SaveLogs copies.
	AuditPolicy string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
	// RealNodes is the number of real nodes (a kubelet and containerd each, see
	// realnode.go) to start beside the fake ones; RealNode shapes them.
	RealNodes int
	RealNode  RealNodeSpec
	// Oldest runs the control plane and the real nodes' kubelets of the oldest Kubernetes
	// the default installation supports (hack/tools/kubernetes-oldest) instead of the
	// newest pinned release.
	Oldest bool
	// FeatureGates and RuntimeConfig turn on features and API versions of the control plane
	// beyond its release's defaults (kwokctl's --kube-feature-gates and --kube-runtime-config,
	// e.g. "GenericWorkload=true" and "scheduling.k8s.io/v1beta1=true").
	FeatureGates, RuntimeConfig string
	// Setup, when set, runs once the cluster and its nodes are up (e.g. to install the CRDs).
	// If it fails, Start stops the cluster and returns its error.
	Setup func(ctx context.Context, c *Cluster) error
}

// Cluster is a running control plane.
type Cluster struct {
	// Name is the kwokctl cluster name.
	Name string
	// Kubeconfig is the path of an admin kubeconfig for the cluster.
	Kubeconfig string
	// Config is the admin rest.Config.
	Config *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// Tools locates the pinned binaries.
	Tools Tools
	// Real are the real nodes (nil without Options.RealNodes).
	Real *RealNodes

	workdir string
	logf    func(format string, args ...any)
}

// Start creates and starts a cluster, then its fake nodes. The caller must Stop it.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	tools, err := FindTools()
	if err == nil && opts.Oldest {
		tools, err = tools.Oldest()
	}
	if err != nil {
		return nil, err
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	prefix := opts.Name
	if prefix == "" {
		prefix = "faultline"
	}
	name := prefix + "-" + randomSuffix()
	workdir := tools.workdir()
	c := &Cluster{Name: name, Tools: tools, workdir: workdir, logf: logf}

	// kwokctl picks each component's port by scanning down from 32767 for a free one, and
	// the components bind them only later: two clusters created at once (go test runs
	// packages in parallel) get the same ports. Creations on this machine take turns.
	unlock, err := lockCreation(ctx, workdir)
	if err != nil {
		return nil, err
	}
	extra := []string{kwokctlConfig(opts, c.pkiDir())}
	stageFile, err := writeStages(workdir, name, extra...)
	if err != nil {
		unlock()
		return nil, err
	}
	defer os.Remove(stageFile) // kwokctl keeps its own copy in the cluster's directory
	args := []string{
		"create", "cluster", "--name", name, "--runtime", "binary",
		"--etcd-binary", tools.Etcd,
		"--kube-apiserver-binary", filepath.Join(tools.KubeDir, "kube-apiserver"),
		"--kube-controller-manager-binary", filepath.Join(tools.KubeDir, "kube-controller-manager"),
		"--kube-scheduler-binary", filepath.Join(tools.KubeDir, "kube-scheduler"),
		"--kwok-controller-binary", tools.Kwok,
		"--config", stageFile,
		"--wait", "120s",
		// The cluster's data is thrown away with it: fsyncs would only measure the disk.
		"--extra-args", "etcd=unsafe-no-fsync=true",
	}
	if opts.ControllerManagerQPS > 0 {
		args = append(args,
			"--extra-args", fmt.Sprintf("kube-controller-manager=kube-api-qps=%d", opts.ControllerManagerQPS),
			"--extra-args", fmt.Sprintf("kube-controller-manager=kube-api-burst=%d", 2*opts.ControllerManagerQPS))
	}
	for _, a := range opts.ExtraArgs {
		args = append(args, "--extra-args", a)
	}
	if opts.FeatureGates != "" {
		args = append(args, "--kube-feature-gates", opts.FeatureGates)
	}
	if opts.RuntimeConfig != "" {
		args = append(args, "--kube-runtime-config", opts.RuntimeConfig)
	}
	if opts.AuditPolicy != "" {
		args = append(args, "--kube-audit-policy", opts.AuditPolicy)
	}
	// A cluster that fails to come up keeps its components' logs, and is deleted.
	fail := func(err error) (*Cluster, error) {
		if dir, lerr := c.SaveLogs(filepath.Join(tools.Root, "_output", "test-logs")); lerr == nil {
			err = fmt.Errorf("%w (component logs in %s)", err, dir)
		}
		_ = c.Stop()
		return nil, err
	}
	start := time.Now()
	out, err := kwokctl(ctx, tools, args...)
	unlock() // --wait returned: every component has bound its ports
	if err != nil {
		return fail(fmt.Errorf("kwokctl create cluster %s: %w\n%s", name, err, out))
	}
	logf("cluster %s up in %s", name, time.Since(start).Round(time.Millisecond))

	c.Kubeconfig = filepath.Join(workdir, "clusters", name, "kubeconfig.yaml")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fail(fmt.Errorf("load kubeconfig %s: %w", c.Kubeconfig, err))
	}
	// Tests and the demo drive many objects at once; client-side throttling would only
	// measure itself.
	cfg.QPS, cfg.Burst = 500, 1000
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fail(fmt.Errorf("clientset: %w", err))
	}
	if opts.Nodes > 0 {
		if err := c.AddNodes(ctx, opts.Node, 0, opts.Nodes); err != nil {
			return fail(err)
		}
	}
	if opts.RealNodes > 0 {
		if c.Real, err = c.startRealNodes(ctx, opts.RealNodes, opts.RealNode); err != nil {
			return fail(err)
		}
	}
	if opts.Setup != nil {
		if err := opts.Setup(ctx, c); err != nil {
			return fail(fmt.Errorf("set up cluster %s: %w", name, err))
		}
	}
	return c, nil
}

// Stop deletes the cluster: its real nodes, its processes and its files.
func (c *Cluster) Stop() error {
	var err error
	if c.Real != nil {
		err = c.Real.Stop()
		c.Real = nil
	}
	return errors.Join(err, Delete(c.Tools, c.Name))
}

// Delete deletes the cluster of that name (for a cluster started by another process).
func Delete(tools Tools, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := kwokctl(ctx, tools, "delete", "cluster", "--name", name); err != nil {
		return fmt.Errorf("kwokctl delete cluster %s: %w\n%s", name, err, out)
	}
	return nil
}

// AuditLog is the path of the API server's audit log, written when the cluster was started
// with Options.AuditPolicy.
func (c *Cluster) AuditLog() string {
	return filepath.Join(c.workdir, "clusters", c.Name, "logs", "audit.log")
}

// SaveLogs copies the components' logs (and the audit log, if any) to dir/<cluster name>/.
func (c *Cluster) SaveLogs(dir string) (string, error) {
	src := filepath.Join(c.workdir, "clusters", c.Name, "logs")
	dst := filepath.Join(dir, c.Name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return "", fmt.Errorf("read logs of %s: %w", c.Name, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return "", err
		}
	}
	if c.Real != nil {
		if err := c.Real.saveLogs(dst); err != nil {
			return "", err
		}
	}
	return dst, nil
}

func kwokctl(ctx context.Context, tools Tools, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, tools.Kwokctl, args...)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+tools.workdir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// lockCreation takes a lock on this workdir's cluster creation, waiting for it until ctx
// ends. The lock is released when the returned function is called or the process dies.
func lockCreation(ctx context.Context, workdir string) (func(), error) {
	if err := os.MkdirAll(workdir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(workdir, "create.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("wait for another cluster's creation: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// writeStages writes the embedded kwok configuration (stages/) and the extra documents into
// one multi-document file for kwokctl --config, one per cluster.
func writeStages(workdir, cluster string, extra ...string) (string, error) {
	names, err := fs.Glob(stages, "stages/*.yaml")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	var docs []string
	for _, n := range names {
		b, err := stages.ReadFile(n)
		if err != nil {
			return "", err
		}
		docs = append(docs, strings.TrimSpace(string(b)))
	}
	for _, e := range extra {
		docs = append(docs, strings.TrimSpace(e))
	}
	if err := os.MkdirAll(workdir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(workdir, cluster+"-kwok.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o644)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Kubectl runs the pinned kubectl against the cluster, as an operator or a user would, and
// returns its output; an error carries the command line and the output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, c.Tools.Kubectl(), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// ApplyKustomization applies a kustomization directory (e.g. deploy/daemonset) with the
// pinned kubectl, server-side, as an operator would.
func (c *Cluster) ApplyKustomization(ctx context.Context, dir string) error {
	_, err := c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-k", dir)
	return err
}

// kwokctlConfig is the cluster's kwokctl configuration document: its components' flags beyond
// kwokctl's own (a config document rather than --extra-args, which kwokctl v0.8.0 mixes up
// between components when several get more than one), and what real nodes need
// (realNodeKwokctlConfig).
//
// The scheduler and the controller-manager run without leader election: each is alone, and
// on this 2-core machine an API server busy with tens of thousands of pods answered a lease
// renewal too late, so that both exited ("Leaderelection lost") and the bench's pods were never
// bound.
func kwokctlConfig(opts Options, pkiDir string) string {
	var b strings.Builder
	b.WriteString(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
componentsPatches:
- name: kube-controller-manager
  extraArgs:
  - {key: leader-elect, value: "false"}
- name: kube-scheduler
  extraArgs:
  - {key: leader-elect, value: "false"}
`)
	if opts.SchedulerQPS > 0 {
		fmt.Fprintf(&b, "  - {key: kube-api-qps, value: \"%d\"}\n  - {key: kube-api-burst, value: \"%d\"}\n", opts.SchedulerQPS, 2*opts.SchedulerQPS)
	}
	if opts.RealNodes > 0 {
		b.WriteString(realNodeKwokctlConfig(pkiDir))
		// The kubernetes Service's address, where pods on real nodes reach the API server
		// (realnode_service.go).
		fmt.Fprintf(&b, "options:\n  kubeApiserverCertSANs: [%q]\n", apiServiceIP)
	}
	return b.String()
}
