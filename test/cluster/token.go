package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// PodBoundKubeconfig writes, into dir, a kubeconfig that authenticates as the service
// account of pod with a token bound to that pod, as the kubelet would mount it: the API
// server puts the pod's node into the token's user info
// (authentication.kubernetes.io/node-name), which is what node-scoped admission checks.
func (c *Cluster) PodBoundKubeconfig(ctx context.Context, pod *corev1.Pod, dir string) (string, *rest.Config, error) {
	ref := &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	return c.tokenKubeconfig(ctx, pod.Namespace, pod.Spec.ServiceAccountName, ref, pod.Name, dir)
}

// ServiceAccountKubeconfig writes, into dir, a kubeconfig that authenticates as the service
// account namespace/name with a token of its own and nothing else: the admin kubeconfig's
// client certificate would win over any token put beside it.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name, dir string) (string, *rest.Config, error) {
	return c.tokenKubeconfig(ctx, namespace, name, nil, namespace+"-"+name, dir)
}

func (c *Cluster) tokenKubeconfig(ctx context.Context, namespace, sa string, bound *authenticationv1.BoundObjectReference, file, dir string) (string, *rest.Config, error) {
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600), BoundObjectRef: bound},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("token for service account %s/%s: %w", namespace, sa, err)
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile, CertificateAuthorityData: cfg.CAData, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "ctx"
	path := filepath.Join(dir, file+".kubeconfig")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", nil, err
	}
	return path, cfg, nil
}
