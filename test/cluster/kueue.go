package cluster

// Kueue (sigs.k8s.io/kueue), run beside a test cluster as a local process with its webhooks,
// the way JobSet is (jobset.go): its CRDs applied from its own module (with the conversion
// webhook upstream's kustomization adds), its webhook configurations pointed at the process
// by URL, a serving certificate made for it. Kueue's Go types are not a dependency of this
// module: tests drive it with unstructured objects (pkg/kueue names its API).

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// KueueNamespace is where Kueue's configuration says it runs (its namespace is left out of
// the namespaces whose jobs it manages).
const KueueNamespace = "kueue-system"

// KueueOptions shape the Kueue started beside a cluster.
type KueueOptions struct {
	// ExternalFrameworks are integrations.externalFrameworks (Kind.version.group): the
	// kinds an external controller integrates, whose child Jobs Kueue then never queues.
	ExternalFrameworks []string
	// PodsReadyTimeout and PodsReadyRecoveryTimeout are waitForPodsReady's timeout and
	// recoveryTimeout. Zero keeps Kueue 0.19's defaults (WaitForPodsReady on, 30 min each).
	PodsReadyTimeout, PodsReadyRecoveryTimeout time.Duration
}

// Kueue is a Kueue controller manager running as a local process against a Cluster. Stop it
// with Stop.
type Kueue struct {
	// Version is the Kueue release, as pinned in hack/tools/kueue/go.mod (e.g. "v0.19.2").
	Version string
	// Bin is the kueue binary; ModuleDir is Kueue's module source (CRDs, webhook manifests).
	Bin, ModuleDir string
	// Dir holds the serving certificate, the rendered manifests, the config and the log.
	Dir string
	// WebhookAddr is the webhook server's address; ProbeAddr serves /healthz and /readyz.
	WebhookAddr, ProbeAddr string
	// LogPath is the process's log.
	LogPath string
	// Dynamic is a dynamic client of the cluster, for Kueue's objects.
	Dynamic dynamic.Interface

	*Process
}

// StartKueue builds Kueue (first run only) and starts it beside the cluster, with its files
// in dir, and returns once its webhooks answer the API server. Its CRDs and webhook
// configurations stay after Stop (with failurePolicy Fail, Kueue's objects cannot then be
// written, which says more than objects nothing acts on).
func (c *Cluster) StartKueue(ctx context.Context, dir string, opts KueueOptions) (k *Kueue, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	k = &Kueue{Dir: dir, LogPath: filepath.Join(dir, "kueue.log")}
	if k.Bin, k.ModuleDir, err = findKueue(c.Tools.Root); err != nil {
		return nil, err
	}
	k.Version = strings.TrimPrefix(filepath.Base(filepath.Dir(k.Bin)), "kueue-")
	if k.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	start := time.Now()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", KueueNamespace, err)
	}
	certDir := filepath.Join(dir, "certs")
	caPEM, err := writeServingCert(certDir)
	if err != nil {
		return nil, fmt.Errorf("Kueue webhook certificate: %w", err)
	}
	if k.WebhookAddr, err = FreeAddress(); err != nil {
		return nil, err
	}
	if k.ProbeAddr, err = FreeAddress(); err != nil {
		return nil, err
	}
	url := "https://" + k.WebhookAddr
	crdDir := filepath.Join(dir, "crds")
	if err := c.renderKueueCRDs(ctx, k.ModuleDir, crdDir, url, caPEM); err != nil {
		return nil, err
	}
	if err := c.InstallCRDs(ctx, crdDir); err != nil {
		return nil, fmt.Errorf("install Kueue CRDs: %w", err)
	}
	// Webhooks of integrations that are not enabled get Kueue's no-op handlers, as in a real
	// installation.
	if err := c.registerWebhooks(ctx, k.ModuleDir, "kueue-", url, caPEM); err != nil {
		return nil, err
	}
	configPath, err := k.writeConfig(certDir, opts)
	if err != nil {
		return nil, err
	}
	bin, args := inOwnEtc(certDir, k.Bin, "--config", configPath, "--kubeconfig", c.Kubeconfig)
	if k.Process, err = startProcess(k.LogPath, nil, bin, args...); err != nil {
		return nil, err
	}
	proc := k.Process // the named result is nil on the error paths below
	defer func() {
		if err != nil {
			proc.Stop()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	started := time.Now()
	if err := waitReadyz(ctx, k.Process, k.ProbeAddr); err != nil {
		return nil, fmt.Errorf("Kueue %s pid %d not ready: %w\nkueue.log (last 30 lines of %s):\n%s", k.Version, k.Pid(), err, k.LogPath, k.Tail(30))
	}
	probeReady := time.Now()
	if err := k.waitWebhooks(ctx); err != nil {
		return nil, fmt.Errorf("Kueue %s pid %d webhooks: %w\nkueue.log (last 30 lines of %s):\n%s", k.Version, k.Pid(), err, k.LogPath, k.Tail(30))
	}
	c.logf("Kueue %s pid %d ready in %s: installed in %s, readyz after %s more, webhooks called after %s more (webhooks on %s)",
		k.Version, k.Pid(), time.Since(start).Round(time.Millisecond), started.Sub(start).Round(time.Millisecond),
		probeReady.Sub(started).Round(time.Millisecond), time.Since(probeReady).Round(time.Millisecond), k.WebhookAddr)
	return k, nil
}

// findKueue builds Kueue if it is not built yet and returns its binary and module directory.
func findKueue(root string) (bin, moduleDir string, err error) {
	return findBuiltTool(root, "Kueue", "kueue", "KUEUE_BIN", "kueue-dir")
}

// kustomize renders a kustomization directory (of an upstream module: Kueue's, JobSet's) into
// its documents.
func (c *Cluster) kustomize(ctx context.Context, kdir string) ([]map[string]any, error) {
	cmd := exec.CommandContext(ctx, c.Tools.Kubectl(), "kustomize", kdir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w\n%s", kdir, err, stderr.Bytes())
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 64<<10)
	var docs []map[string]any
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return docs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode kustomize output of %s: %w", kdir, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// renderKueueCRDs writes Kueue's CRDs into dir as upstream's config/components/crd renders
// them, with the conversion webhook (between v1beta1 and v1beta2) pointed at url.
func (c *Cluster) renderKueueCRDs(ctx context.Context, moduleDir, dir, url string, caPEM []byte) error {
	docs, err := c.kustomize(ctx, filepath.Join(moduleDir, "config", "components", "crd"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	for _, doc := range docs {
		if doc["kind"] != "CustomResourceDefinition" {
			continue
		}
		if cc, ok, _ := unstructured.NestedMap(doc, "spec", "conversion", "webhook", "clientConfig"); ok {
			path, _, _ := unstructured.NestedString(cc, "service", "path")
			if err := unstructured.SetNestedMap(doc, map[string]any{"url": url + path, "caBundle": base64.StdEncoding.EncodeToString(caPEM)},
				"spec", "conversion", "webhook", "clientConfig"); err != nil {
				return err
			}
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteString("\n")
	}
	return os.WriteFile(filepath.Join(dir, "kueue-crds.yaml"), buf.Bytes(), 0o644)
}

// writeConfig writes Kueue's Configuration (config.kueue.x-k8s.io/v1beta2; JSON is YAML)
// and returns its path.
func (k *Kueue) writeConfig(certDir string, opts KueueOptions) (string, error) {
	host, port, err := net.SplitHostPort(k.WebhookAddr)
	if err != nil {
		return "", err
	}
	var portNum int
	if _, err := fmt.Sscan(port, &portNum); err != nil {
		return "", fmt.Errorf("webhook port %q: %w", port, err)
	}
	integrations := map[string]any{"frameworks": []any{"batch/job"}}
	if len(opts.ExternalFrameworks) > 0 {
		integrations["externalFrameworks"] = opts.ExternalFrameworks
	}
	cfg := map[string]any{
		"apiVersion": "config.kueue.x-k8s.io/v1beta2",
		"kind":       "Configuration",
		"namespace":  KueueNamespace,
		// One replica, no Lease to wait for.
		"leaderElection": map[string]any{"leaderElect": false},
		// Internal cert management writes a Secret and patches the webhook configurations
		// for an in-cluster Service; the API server reaches this process by URL instead.
		"internalCertManagement": map[string]any{"enable": false},
		"webhook":                map[string]any{"host": host, "port": portNum, "certDir": certDir},
		"metrics":                map[string]any{"bindAddress": "0"},
		"health":                 map[string]any{"healthProbeBindAddress": k.ProbeAddr},
		// Upstream's shipped client rate limit (config/components/manager).
		"clientConnection": map[string]any{"qps": 300, "burst": 500},
		"integrations":     integrations,
		// The on-demand visibility API server listens on a fixed port (8082) and needs an
		// APIService; nothing here reads it.
		"featureGates": map[string]any{"VisibilityOnDemand": false},
	}
	if opts.PodsReadyTimeout > 0 || opts.PodsReadyRecoveryTimeout > 0 {
		w := map[string]any{}
		if opts.PodsReadyTimeout > 0 {
			w["timeout"] = opts.PodsReadyTimeout.String()
		}
		if opts.PodsReadyRecoveryTimeout > 0 {
			w["recoveryTimeout"] = opts.PodsReadyRecoveryTimeout.String()
		}
		cfg["waitForPodsReady"] = w
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(k.Dir, "kueue-config.yaml")
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

var resourceFlavorGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}

// waitWebhooks waits until the API server calls Kueue's webhooks: a dry-run create of a
// ResourceFlavor comes back with the finalizer Kueue's defaulting webhook adds (the CRD adds
// none). The API server learns of webhook configurations through an informer, so a create
// that merely succeeds proves nothing.
func (k *Kueue) waitWebhooks(ctx context.Context) error {
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
		"metadata": map[string]any{"name": "faultline-webhook-probe"},
	}}
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if k.Exited() {
			return false, fmt.Errorf("exited: %s", k.cmd.ProcessState)
		}
		got, err := k.Dynamic.Resource(resourceFlavorGVR).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return false, nil
		}
		last = errors.New("dry-run create succeeded without the defaulting webhook's finalizer")
		return len(got.GetFinalizers()) > 0, nil
	})
	if err != nil {
		return fmt.Errorf("defaulting webhook: %w (last: %v)", err, last)
	}
	return nil
}

// Stop kills Kueue and waits for it to exit.
func (k *Kueue) Stop() {
	if k.Process != nil {
		k.Process.Stop()
	}
}

// waitReadyz polls a process's health probe's /readyz until it answers 200 (an HTTP
// endpoint has nothing to watch).
func waitReadyz(ctx context.Context, p *Process, addr string) error {
	client := &http.Client{Timeout: time.Second}
	url := "http://" + addr + "/readyz"
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("exited: %s", p.cmd.ProcessState)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil && last != "" {
		return fmt.Errorf("%s: %w (last answer: %s)", url, err, last)
	}
	return err
}

// kueueMetricsCertDir is where Kueue's manager reads its metrics serving certificate when its
// internal certificate management is off (cmd/kueue/main.go, a constant: the mount of its
// Deployment's Secret). It reads it even with metrics off, and exits without it.
const kueueMetricsCertDir = "/etc/kueue/metrics/certs"

// inOwnEtc runs bin in a mount namespace of its own, with a tmpfs over /etc that holds only
// certDir's tls.crt and tls.key at kueueMetricsCertDir, rather than write into the host's
// /etc. Kueue reads nothing else there: every address it dials is an IP. The shell execs
// bin, so that the process started is Kueue's (its pid, its kill). As root, a mount namespace
// is enough; otherwise an unprivileged user namespace maps this user to root inside.
func inOwnEtc(certDir, bin string, args ...string) (string, []string) {
	script := `mount -t tmpfs tmpfs /etc && mkdir -p ` + kueueMetricsCertDir + ` && cp "$0/tls.crt" "$0/tls.key" ` + kueueMetricsCertDir + `/ && exec "$@"`
	wrap := []string{"--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		wrap = append([]string{"--user", "--map-root-user"}, wrap...)
	}
	wrap = append(wrap, "--", "/bin/sh", "-c", script, certDir, bin)
	return "unshare", append(wrap, args...)
}
