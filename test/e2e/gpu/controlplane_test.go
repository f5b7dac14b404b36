package gpu

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/faultline-dev/faultline/test/cluster"
)

// controlPlane is etcd and a kube-apiserver, nothing else: a GPU machine has neither kwok nor
// room for the whole pinned tool set, and the agent needs no scheduler or controller (it
// marks pods bound to its node by name, Pending or not).
type controlPlane struct {
	Config     *rest.Config
	Client     kubernetes.Interface
	Kubeconfig string
}

// adminToken authenticates the test and the agent as a member of system:masters. The agent's
// least-privilege RBAC and admission policy are the agent e2e suite's subject, not this one's.
const adminToken = "faultline-gpu-e2e-admin"

func startControlPlane(t *testing.T, etcdBin, apiserverBin string) *controlPlane {
	t.Helper()
	dir := t.TempDir()
	etcdURL, peerURL := "http://"+cluster.MustFreeAddress(t), "http://"+cluster.MustFreeAddress(t)
	apiAddr := cluster.MustFreeAddress(t)
	apiHost, apiPort, err := net.SplitHostPort(apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	cluster.StartProcess(t, etcdBin,
		"--data-dir", filepath.Join(dir, "etcd"), "--unsafe-no-fsync",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL)

	pub, key := writeServiceAccountKeys(t, dir)
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+",admin,admin,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cluster.StartProcess(t, apiserverBin,
		"--etcd-servers", etcdURL,
		"--bind-address", apiHost, "--advertise-address", apiHost, "--secure-port", apiPort,
		"--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", tokens, "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", pub, "--service-account-signing-key-file", key,
		"--service-cluster-ip-range", "10.96.0.0/16",
		// Its own Endpoints may not name a loopback address; nothing here needs them.
		"--endpoint-reconciler-type", "none",
		// No controller-manager creates the namespaces' default service accounts.
		"--disable-admission-plugins", "ServiceAccount")

	cfg := &rest.Config{
		Host:            "https://" + apiAddr,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, // its self-signed serving certificate
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var lastErr error
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, lastErr = client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return lastErr == nil, nil
	}); err != nil {
		t.Fatalf("kube-apiserver not ready: %v (last: %v)", err, lastErr)
	}

	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["gpu-e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, InsecureSkipTLSVerify: true}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: adminToken}
	kc.Contexts["gpu-e2e"] = &clientcmdapi.Context{Cluster: "gpu-e2e", AuthInfo: "admin"}
	kc.CurrentContext = "gpu-e2e"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return &controlPlane{Config: cfg, Client: client, Kubeconfig: kubeconfig}
}

// writeServiceAccountKeys writes the key pair the API server signs and checks tokens with.
func writeServiceAccountKeys(t *testing.T, dir string) (pubPath, keyPath string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPath, keyPath = filepath.Join(dir, "sa.pub"), filepath.Join(dir, "sa.key")
	for path, block := range map[string]*pem.Block{
		pubPath: {Type: "PUBLIC KEY", Bytes: pub},
		keyPath: {Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return pubPath, keyPath
}

// listenUnix is a unix socket in a short directory: a socket's path is limited to 108 bytes,
// which a test's TempDir can exceed.
func listenUnix(t *testing.T) (net.Listener, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpu-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(fmt.Errorf("listen on %s: %w", path, err))
	}
	return l, path
}
