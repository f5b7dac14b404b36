package cli

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestMessage(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/apis", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED},
	}}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "faultline.dev", Kind: "TrainingRun"}, "zero", field.ErrorList{
		field.Invalid(field.NewPath("spec", "workers"), 0, "spec.workers in body should be greater than or equal to 1"),
		field.Required(field.NewPath("spec", "template"), ""),
	})
	strict := apierrors.NewBadRequest(`TrainingRun in version "v1alpha1" cannot be handled as a TrainingRun: strict decoding error: unknown field "spec.wokers"`)
	for name, tc := range map[string]struct {
		err  error
		msg  string
		code int
	}{
		"nil": {nil, "", ExitOK},
		"unreachable": {fmt.Errorf("list: %w", refused),
			"cannot reach the Kubernetes API server at https://127.0.0.1:6443 (connection refused).\n" +
				"Is the cluster running? For a local one run `make cluster-up` and pass the kubeconfig it prints with --kubeconfig (or export KUBECONFIG).", ExitUsage},
		"unreachable, a remote cluster": {fmt.Errorf("list: %w", &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/apis", Err: &net.OpError{
			Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}}),
			"cannot reach the Kubernetes API server at https://10.0.0.1:6443 (connection refused).\n" +
				"Is the cluster up, and is it the one you mean? `kubectl config current-context` names the kubeconfig's context (--context picks another), " +
				"`kubectl cluster-info` tries the same address.", ExitUsage},
		"invalid lists every field": {fmt.Errorf("create: %w", invalid),
			"the API server rejected trainingrun \"zero\":\n" +
				"  spec.workers: Invalid value: 0: spec.workers in body should be greater than or equal to 1\n" +
				"  spec.template: Required value", ExitUsage},
		"strict decoding":     {strict, `the API server rejected the TrainingRun: unknown field "spec.wokers"`, ExitUsage},
		"run not found":       {&RunNotFoundError{Name: "llm", Namespace: "research"}, "trainingrun llm not found in namespace research", ExitUsage},
		"API not installed":   {ErrAPINotInstalled, ErrAPINotInstalled.Error(), ExitUsage},
		"run failed, silent":  {&ExitError{Code: ExitRunFailed}, "", ExitRunFailed},
		"usage":               {UsageError("--name is required"), "--name is required", ExitUsage},
		"no cluster":          {ErrNoConfig, ErrNoConfig.Error(), ExitUsage},
		"plain error is kept": {errors.New("boom"), "boom", ExitUsage},
	} {
		t.Run(name, func(t *testing.T) {
			server := "https://127.0.0.1:6443"
			if name == "unreachable, a remote cluster" {
				server = "https://10.0.0.1:6443"
			}
			msg, code := Message(tc.err, server)
			if msg != tc.msg || code != tc.code {
				t.Errorf("Message() = %q, %d\nwant        %q, %d", msg, code, tc.msg, tc.code)
			}
		})
	}
}
