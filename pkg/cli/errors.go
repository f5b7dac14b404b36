package cli

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
)

// Exit codes of the launcher. They are part of its interface: scripts and CI jobs branch
// on them (`launcher watch` in particular).
const (
	// ExitOK: the command did what was asked; for watch, the run Succeeded.
	ExitOK = 0
	// ExitRunFailed: the run that was watched Failed (its verdict was printed).
	ExitRunFailed = 1
	// ExitUsage: bad usage, or an error from the API server or the connection to it.
	ExitUsage = 2
	// ExitDiffers: `launcher convert` printed the TrainingRuns, but one would not behave as
	// its source did (what differs is on standard error); `launcher install --diff` found
	// that the install would change something (the diff printed).
	ExitDiffers = 3
)

// ExitError ends a command with Code. Err, when set, is what to tell the person; a nil
// Err means everything to say has been printed already.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// UsageError is a mistake in how the command was called.
func UsageError(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// RunNotFoundError says that a TrainingRun does not exist where it was looked for.
type RunNotFoundError struct{ Name, Namespace string }

func (e *RunNotFoundError) Error() string {
	return fmt.Sprintf("trainingrun %s not found in namespace %s", e.Name, e.Namespace)
}

// ErrAPINotInstalled: the API server does not serve faultline.dev/v1alpha1.
var ErrAPINotInstalled = errors.New("the TrainingRun API (faultline.dev/v1alpha1) is not installed in this cluster: " +
	"install it with `launcher install` (or `kubectl apply --server-side -k deploy/`)")

// Message turns an error into what the person reads and the exit code. server is the API
// server's address, for the message when it cannot be reached. It never returns a stack
// trace or a Go type name.
func Message(err error, server string) (string, int) {
	if err == nil {
		return "", ExitOK
	}
	code := ExitUsage
	var ee *ExitError
	if errors.As(err, &ee) {
		code = ee.Code
		if ee.Err == nil {
			return "", code
		}
	}
	switch {
	case clientcmd.IsEmptyConfig(err):
		return ErrNoConfig.Error(), code
	case Unreachable(err):
		where := "the Kubernetes API server"
		if server != "" {
			where += " at " + server
		}
		// Where the user is decides what helps: the local dev cluster is on this machine;
		// anywhere else it is the kubeconfig's context or the way to the cluster.
		hint := "Is the cluster up, and is it the one you mean? `kubectl config current-context` names the kubeconfig's context " +
			"(--context picks another), `kubectl cluster-info` tries the same address."
		if loopback(server) {
			hint = "Is the cluster running? For a local one run `make cluster-up` and pass the kubeconfig it prints " +
				"with --kubeconfig (or export KUBECONFIG)."
		}
		return fmt.Sprintf("cannot reach %s (%s).\n%s", where, rootCause(err), hint), code
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apiMessage(err, status, server), code
	}
	return err.Error(), code
}

// apiMessage renders an API server error. A 422 lists every field the server named: that
// is where a person has to look. A refusal of who the person is names the server that
// refused, so that the wrong cluster shows.
func apiMessage(err error, status apierrors.APIStatus, server string) string {
	who := "the API server"
	if server != "" {
		who += " at " + server
	}
	st := status.Status()
	switch {
	case apierrors.IsInvalid(err) && st.Details != nil && len(st.Details.Causes) > 0:
		var b strings.Builder
		name := st.Details.Name
		if name == "" {
			name = "the object"
		}
		kind := st.Details.Kind
		if kind == "" {
			kind = "trainingrun"
		}
		fmt.Fprintf(&b, "the API server rejected %s %q:", strings.ToLower(strings.TrimSuffix(kind, ".faultline.dev")), name)
		for _, c := range st.Details.Causes {
			if c.Field != "" {
				fmt.Fprintf(&b, "\n  %s: %s", c.Field, c.Message)
			} else {
				fmt.Fprintf(&b, "\n  %s", c.Message)
			}
		}
		return b.String()
	case apierrors.IsBadRequest(err) && strings.Contains(st.Message, "strict decoding error: "):
		// A misspelled or unknown field, refused by fieldValidation=Strict.
		_, detail, _ := strings.Cut(st.Message, "strict decoding error: ")
		return "the API server rejected the TrainingRun: " + detail
	case apierrors.IsUnauthorized(err):
		return who + " did not accept your credentials (401 Unauthorized): " + st.Message +
			"\nCheck --kubeconfig, --context and --token."
	case apierrors.IsForbidden(err):
		return "not allowed by " + who + ": " + st.Message
	}
	return err.Error()
}

// Unreachable reports whether err means the API server could not be reached at all.
func Unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	var ue *url.Error
	switch {
	case errors.As(err, &dns), errors.As(err, &op):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return true
	case errors.As(err, &ue) && ue.Timeout():
		return true
	}
	return false
}

// loopback reports whether the API server's address is on this machine, as the local dev
// cluster's is.
func loopback(server string) bool {
	u, err := url.Parse(server)
	if err != nil || u.Hostname() == "" {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

// rootCause is the innermost message of a connection error ("connection refused").
func rootCause(err error) string {
	var se syscall.Errno
	if errors.As(err, &se) {
		return se.Error()
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err.Error()
	}
	return err.Error()
}
