package cluster

// JobSet (sigs.k8s.io/jobset), run beside a test cluster so that benchmarks can compare
// faultline with it on the same control plane. JobSet's Go types are deliberately not a
// dependency of this module: it is driven with unstructured objects and the dynamic client,
// and installed from the manifests in its own module (hack/build-tools.sh jobset-dir).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
)

// JobSetGVR is the JobSet resource that the pinned release serves.
var JobSetGVR = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// Labels JobSet puts on its Jobs and their pods.
const (
	// JobSetNameLabel names the pod's JobSet.
	JobSetNameLabel = "jobset.sigs.k8s.io/jobset-name"
	// JobSetRestartAttemptLabel is the JobSet's status.restarts when the pod's Job was created.
	JobSetRestartAttemptLabel = "jobset.sigs.k8s.io/restart-attempt"
)

// JobSet's client rate limit, written into its config explicitly. They are JobSet's own
// defaults (api/config/v1alpha1 DefaultClientConnectionQPS/Burst and the --kube-api-qps/
// --kube-api-burst flag defaults, 500 and 500), pinned here so that a benchmark states the
// setting it compared at and cannot drift if a later release changes the default.
const (
	JobSetClientQPS   = 500
	JobSetClientBurst = 500
)

// JobSet is a JobSet controller manager running as a local process against a Cluster, with
// its webhooks registered in the cluster. Stop it with Stop.
type JobSet struct {
	// Version is the JobSet release, as pinned in hack/tools/go.mod (e.g. "v0.12.0").
	Version string
	// Bin is the jobset binary; ModuleDir is JobSet's module source, whence the CRD and the
	// webhook manifests come.
	Bin, ModuleDir string
	// Dir holds the serving certificate, the config file and the log.
	Dir string
	// WebhookAddr is the webhook server's address (127.0.0.1:port); ProbeAddr serves
	// /healthz and /readyz.
	WebhookAddr, ProbeAddr string
	// LogPath is the process's log (stdout and stderr).
	LogPath string
	// Client is a dynamic client for JobSets in the cluster.
	Client dynamic.NamespaceableResourceInterface

	// The JobSet process (Pid, Exited, Tail; Stop below).
	*Process
}

// StartJobSet builds (first run only) and starts JobSet beside the cluster, with its files in
// dir, and returns once its webhooks answer the API server: the health probe is ready, and
// server-side dry-run creates of a JobSet come back mutated by its defaulting webhook and
// rejected by its validating webhook. Takes a few seconds once built.
//
// The webhooks are registered as upstream's config/components/webhook renders them (the pod
// webhooks only for pods labelled with a JobSet name), renamed with upstream's "jobset-"
// prefix and pointed at the local process by URL. They stay registered after Stop: with
// failurePolicy Fail, JobSets cannot then be created, which says more than JobSets that
// silently never run. Calling StartJobSet again re-registers them for the new process.
func (c *Cluster) StartJobSet(ctx context.Context, dir string) (j *JobSet, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	j = &JobSet{Dir: dir, LogPath: filepath.Join(dir, "jobset.log")}
	if j.Bin, j.ModuleDir, err = findJobSet(c.Tools.Root); err != nil {
		return nil, err
	}
	j.Version = strings.TrimPrefix(filepath.Base(filepath.Dir(j.Bin)), "jobset-")
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	j.Client = dyn.Resource(JobSetGVR)

	start := time.Now()
	if err := c.InstallCRDs(ctx, filepath.Join(j.ModuleDir, "config", "components", "crd", "bases")); err != nil {
		return nil, fmt.Errorf("install JobSet CRD: %w", err)
	}
	certDir := filepath.Join(dir, "certs")
	caPEM, err := writeServingCert(certDir)
	if err != nil {
		return nil, fmt.Errorf("JobSet webhook certificate: %w", err)
	}
	// Free ports rather than upstream's 9443 and 8081, so that clusters (and benchmarks) can
	// run side by side. A port taken between here and the bind shows up as an exit at start.
	if j.WebhookAddr, err = FreeAddress(); err != nil {
		return nil, err
	}
	if j.ProbeAddr, err = FreeAddress(); err != nil {
		return nil, err
	}
	configPath, err := j.writeConfig(certDir)
	if err != nil {
		return nil, err
	}
	if err := c.registerWebhooks(ctx, j.ModuleDir, "jobset-", "https://"+j.WebhookAddr, caPEM); err != nil {
		return nil, err
	}

	// Upstream's zap defaults (development mode: console encoder, debug level) are kept, as
	// its Deployment keeps them: the comparison is with JobSet as shipped.
	if j.Process, err = startProcess(j.LogPath, nil, j.Bin, "--config", configPath, "--kubeconfig", c.Kubeconfig); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			j.Stop()
		}
	}()
	// Once built, JobSet is ready in seconds; a minute more only delays the log's verdict.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	started := time.Now()
	// JobSet's readyz check passes once its webhook server serves TLS.
	if err := waitReadyz(ctx, j.Process, j.ProbeAddr); err != nil {
		return nil, fmt.Errorf("JobSet %s pid %d not ready: %w\njobset.log (last 30 lines of %s):\n%s",
			j.Version, j.Pid(), err, j.LogPath, j.Tail(30))
	}
	probeReady := time.Now()
	if err := j.waitWebhooks(ctx); err != nil {
		return nil, fmt.Errorf("JobSet %s pid %d webhooks: %w\njobset.log (last 30 lines of %s):\n%s",
			j.Version, j.Pid(), err, j.LogPath, j.Tail(30))
	}
	c.logf("JobSet %s pid %d ready in %s: installed in %s, readyz after %s more, webhooks called after %s more (webhooks on %s)",
		j.Version, j.Pid(), time.Since(start).Round(time.Millisecond), started.Sub(start).Round(time.Millisecond),
		probeReady.Sub(started).Round(time.Millisecond), time.Since(probeReady).Round(time.Millisecond), j.WebhookAddr)
	return j, nil
}

// findJobSet builds JobSet if it is not built yet and returns its binary and module directory.
func findJobSet(root string) (bin, moduleDir string, err error) {
	return findBuiltTool(root, "JobSet", "jobset", "JOBSET_BIN", "jobset-dir")
}

// findBuiltTool builds a tool of hack/build-tools.sh (its group) if it is not built yet, and
// returns its binary (the paths line binVar=) and its module directory (the script's dirCmd).
func findBuiltTool(root, name, group, binVar, dirCmd string) (bin, moduleDir string, err error) {
	script := filepath.Join(root, "hack", "build-tools.sh")
	build := exec.Command(script, group)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", "", fmt.Errorf("build %s with %s %s: %w", name, script, group, err)
	}
	out, err := exec.Command(script, "paths").Output()
	if err != nil {
		return "", "", fmt.Errorf("%s paths: %w", script, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), binVar+"="); ok {
			bin = v
		}
	}
	if bin == "" {
		return "", "", fmt.Errorf("%s paths names no %s", script, binVar)
	}
	out, err = exec.Command(script, dirCmd).Output()
	if err != nil {
		return "", "", fmt.Errorf("%s %s: %w", script, dirCmd, err)
	}
	return bin, strings.TrimSpace(string(out)), nil
}

// writeServingCert writes a serving certificate for 127.0.0.1, signed by a CA made for it
// alone, into dir as tls.crt and tls.key (the names controller-runtime's webhook server
// reads) and ca.crt, and returns the CA in PEM, for the webhooks' caBundle. The CA's key is
// never written: nothing else is ever signed with it.
func writeServingCert(dir string) (caPEM []byte, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "faultline-test jobset webhook CA"},
		NotBefore:             now.Add(-time.Hour), // a clock a little behind must not find it not yet valid
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serving := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		// The API server calls the webhooks at https://127.0.0.1:<port>/… and checks the IP SAN.
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(7 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	servingDER, err := x509.CreateCertificate(rand.Reader, serving, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	files := map[string][]byte{
		"ca.crt":  caPEM,
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: servingDER}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return caPEM, nil
}

// writeConfig writes JobSet's Configuration (config.jobset.x-k8s.io/v1alpha1; JSON is YAML)
// and returns its path.
func (j *JobSet) writeConfig(certDir string) (string, error) {
	host, port, err := net.SplitHostPort(j.WebhookAddr)
	if err != nil {
		return "", err
	}
	var portNum int
	if _, err := fmt.Sscan(port, &portNum); err != nil {
		return "", fmt.Errorf("webhook port %q: %w", port, err)
	}
	cfg := map[string]any{
		"apiVersion": "config.jobset.x-k8s.io/v1alpha1",
		"kind":       "Configuration",
		// One replica, no Lease to wait for.
		"leaderElection": map[string]any{"leaderElect": false},
		// Internal cert management writes a Secret and patches the webhook configurations
		// for an in-cluster Service; here the API server reaches the process by URL with
		// the certificate made above.
		"internalCertManagement": map[string]any{"enable": false},
		"webhook":                map[string]any{"host": host, "port": portNum, "certDir": certDir},
		"metrics":                map[string]any{"bindAddress": "0"}, // off: nothing scrapes it
		"health":                 map[string]any{"healthProbeBindAddress": j.ProbeAddr},
		"clientConnection":       map[string]any{"qps": JobSetClientQPS, "burst": JobSetClientBurst},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(j.Dir, "jobset-config.yaml")
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

// registerWebhooks server-side applies the Mutating/ValidatingWebhookConfigurations that a
// module's config/components/webhook kustomization renders (JobSet's, Kueue's), named with
// upstream's namePrefix (prefix, from its config/default), each webhook's clientConfig
// rewritten from the in-cluster Service to url (+ its path) with caBundle. Rendering the
// kustomization rather than reading a release manifest keeps upstream's patches (JobSet's
// limit its pod webhooks to pods labelled with a JobSet name; without them every pod of the
// cluster would go through JobSet).
func (c *Cluster) registerWebhooks(ctx context.Context, moduleDir, prefix, url string, caPEM []byte) error {
	docs, err := c.kustomize(ctx, filepath.Join(moduleDir, "config", "components", "webhook"))
	if err != nil {
		return err
	}
	registered := 0
	for _, doc := range docs {
		kind, _ := doc["kind"].(string)
		if kind != "MutatingWebhookConfiguration" && kind != "ValidatingWebhookConfiguration" {
			continue // the webhook Service, which nothing here backs
		}
		meta, _ := doc["metadata"].(map[string]any)
		name := prefix + fmt.Sprint(meta["name"])
		meta["name"] = name
		hooks, _ := doc["webhooks"].([]any)
		for _, h := range hooks {
			hook, _ := h.(map[string]any)
			path, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
			if path == "" {
				return fmt.Errorf("%s %s webhook %v has no service path to rewrite", kind, name, hook["name"])
			}
			hook["clientConfig"] = map[string]any{"url": url + path, "caBundle": base64.StdEncoding.EncodeToString(caPEM)}
		}
		body, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{FieldManager: "faultline-test", Force: ptr.To(true)}
		if kind == "MutatingWebhookConfiguration" {
			_, err = c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, name, types.ApplyPatchType, body, opts)
		} else {
			_, err = c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, name, types.ApplyPatchType, body, opts)
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", kind, name, err)
		}
		registered++
	}
	if registered != 2 {
		return fmt.Errorf("the webhook kustomization of %s rendered %d webhook configurations, want 2 (mutating, validating)", moduleDir, registered)
	}
	return nil
}

// waitWebhooks waits until the API server calls both webhooks. A dry-run create that merely
// succeeds would prove nothing while the API server has not yet loaded the new webhook
// configurations (it learns of them through an informer), so the probes look for the
// webhooks' own effects: the defaulting webhook sets spec.network.enableDNSHostnames (which
// the CRD does not default), and the validating webhook rejects a subdomain that is not a
// DNS name (which the CRD does not check). Each configuration holds the JobSet webhook and
// the pod webhook both, so the pod webhooks are registered too.
func (j *JobSet) waitWebhooks(ctx context.Context) error {
	const ns = "default"
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	probe := NewJobSet(JobSetSpec{
		Name: "faultline-webhook-probe", Namespace: ns, Workers: 1,
		PodTemplate: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "probe", Image: "busybox"}},
		}},
	})
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if j.Exited() {
			return false, fmt.Errorf("exited: %s", j.cmd.ProcessState)
		}
		got, err := j.Client.Namespace(ns).Create(ctx, probe.DeepCopy(), dryRun)
		if err != nil {
			last = err
			return false, nil
		}
		dns, _, _ := unstructured.NestedBool(got.Object, "spec", "network", "enableDNSHostnames")
		last = errors.New("dry-run create succeeded without the defaulting webhook's spec.network.enableDNSHostnames")
		return dns, nil
	})
	if err != nil {
		return fmt.Errorf("defaulting webhook: %w (last: %v)", err, last)
	}
	invalid := probe.DeepCopy()
	if err := unstructured.SetNestedField(invalid.Object, "not_a_dns_name", "spec", "network", "subdomain"); err != nil {
		return err
	}
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if j.Exited() {
			return false, fmt.Errorf("exited: %s", j.cmd.ProcessState)
		}
		_, err := j.Client.Namespace(ns).Create(ctx, invalid.DeepCopy(), dryRun)
		last = err
		return err != nil && strings.Contains(err.Error(), `"vjobset.kb.io" denied`), nil
	})
	if err != nil {
		return fmt.Errorf("validating webhook: %w (last: %v)", err, last)
	}
	return nil
}

// Stop kills JobSet and waits for it to exit. It leaves the CRD and the webhook
// configurations registered (see StartJobSet).
func (j *JobSet) Stop() {
	if j.Process != nil {
		j.Process.Stop()
	}
}

// Wait watches one JobSet and returns it as soon as cond holds. cond sees every change.
func (j *JobSet) Wait(ctx context.Context, namespace, name string, cond func(*unstructured.Unstructured) (bool, error)) (*unstructured.Unstructured, error) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return j.Client.Namespace(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return j.Client.Namespace(namespace).Watch(ctx, o)
		},
	}
	var last *unstructured.Unstructured
	_, err := watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(e watch.Event) (bool, error) {
		js, ok := e.Object.(*unstructured.Unstructured)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = js
		return cond(js)
	})
	if err != nil {
		return last, fmt.Errorf("wait for JobSet %s/%s: %w", namespace, name, err)
	}
	return last, nil
}

// JobSetCondition returns the JobSet's status condition of type condType, if it has one.
func JobSetCondition(js *unstructured.Unstructured, condType string) (metav1.Condition, bool) {
	conds, _, _ := unstructured.NestedSlice(js.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != condType {
			continue
		}
		var cond metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond); err != nil {
			return metav1.Condition{}, false
		}
		return cond, true
	}
	return metav1.Condition{}, false
}

// JobSetRestarts returns the JobSet's status.restarts: how often it has been recreated.
func JobSetRestarts(js *unstructured.Unstructured) int64 {
	n, _, _ := unstructured.NestedInt64(js.Object, "status", "restarts")
	return n
}

// JobSetSpec is what a benchmark varies in a JobSet: one replicatedJob ("workers") of one
// Indexed Job with Workers pods, none retried by the Job (backoffLimit 0), so that recovery
// is JobSet's: it recreates all Jobs up to MaxRestarts times.
type JobSetSpec struct {
	Name, Namespace string
	// Workers is the Job's parallelism and completions.
	Workers int
	// PodTemplate is the workers' pod template. An empty restartPolicy becomes Never, since
	// JobSet's webhook would default it to OnFailure, which restarts containers in place
	// and never fails the Job (and forbids podFailurePolicy).
	PodTemplate corev1.PodTemplateSpec
	// MaxRestarts is failurePolicy.maxRestarts.
	MaxRestarts int
	// FailJobSetOnPodFailurePolicy adds the failurePolicy rule
	// {action: FailJobSet, onJobFailureReasons: [PodFailurePolicy]}: a Job failed by its
	// podFailurePolicy (see FailJobOnExitCodes) fails the JobSet without a restart.
	FailJobSetOnPodFailurePolicy bool
	// FailJobOnExitCodes, when set, gives the Job a podFailurePolicy rule that fails the Job
	// when a container exits with one of these codes.
	FailJobOnExitCodes []int32
}

// NewJobSet renders s as a jobset.x-k8s.io/v1alpha2 JobSet.
func NewJobSet(s JobSetSpec) *unstructured.Unstructured {
	tmpl := *s.PodTemplate.DeepCopy()
	if tmpl.Spec.RestartPolicy == "" {
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	workers := int32(s.Workers)
	jobSpec := batchv1.JobSpec{
		CompletionMode: ptr.To(batchv1.IndexedCompletion),
		Parallelism:    &workers,
		Completions:    &workers,
		BackoffLimit:   ptr.To[int32](0),
		Template:       tmpl,
	}
	if len(s.FailJobOnExitCodes) > 0 {
		jobSpec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				Operator: batchv1.PodFailurePolicyOnExitCodesOpIn,
				Values:   s.FailJobOnExitCodes,
			},
		}}}
	}
	// The typed Job spec, converted, gives the template the Job API's field names and types
	// (int64 numbers, as unstructured objects need) without JobSet's Go types.
	job, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&jobSpec)
	if err != nil {
		panic(fmt.Sprintf("convert Job spec: %v", err)) // only a programming error gets here
	}
	// Zero-valued timestamps convert to null, which a CRD's schema has no use for.
	unstructured.RemoveNestedField(job, "template", "metadata", "creationTimestamp")

	failurePolicy := map[string]any{"maxRestarts": int64(s.MaxRestarts)}
	if s.FailJobSetOnPodFailurePolicy {
		failurePolicy["rules"] = []any{map[string]any{
			// Rule names must match ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ (no dashes).
			"name":                "failJobSetOnPodFailurePolicy",
			"action":              "FailJobSet",
			"onJobFailureReasons": []any{batchv1.JobReasonPodFailurePolicy},
		}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": JobSetGVR.GroupVersion().String(),
		"kind":       "JobSet",
		"metadata":   map[string]any{"name": s.Name, "namespace": s.Namespace},
		"spec": map[string]any{
			"failurePolicy": failurePolicy,
			"replicatedJobs": []any{map[string]any{
				"name":     "workers",
				"replicas": int64(1),
				"template": map[string]any{"spec": job},
			}},
		},
	}}
}
