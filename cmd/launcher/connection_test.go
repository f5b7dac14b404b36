package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/faultline-dev/faultline/pkg/cli"
)

// apiServer stands for an API server: a loopback listener (TLS: client-go sends a kubeconfig's
// credentials to no other) that records who asked it what, and refuses everything (403), so
// that every command ends at its first request.
type apiServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newAPIServer(t *testing.T) *apiServer {
	s := &apiServer{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.Header.Clone())
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"the test's API server refuses everything"}`)
	}))
	t.Cleanup(s.Close)
	return s
}

// take returns what reached the server since the last take, and forgets it.
func (s *apiServer) take() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := s.seen
	s.seen = nil
	return seen
}

// TestLauncherHonoursConnectionFlags (issue 59): kubectl's connection flags reach the API
// server they name, with the credentials they give, for the commands people run and for the
// controller alike (which once read its own --kubeconfig and nothing else, and could act on
// the wrong cluster): two API servers, a kubeconfig with a context for each; every request
// of each command goes where its flags say, and its error names that server.
func TestLauncherHonoursConnectionFlags(t *testing.T) {
	a, b := newAPIServer(t), newAPIServer(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: a
clusters:
- {name: cluster-a, cluster: {server: %q, insecure-skip-tls-verify: true}}
- {name: cluster-b, cluster: {server: %q, insecure-skip-tls-verify: true}}
users:
- {name: user-a, user: {token: token-a}}
- {name: user-b, user: {token: token-b}}
contexts:
- {name: a, context: {cluster: cluster-a, user: user-a, namespace: ns-a}}
- {name: b, context: {cluster: cluster-b, user: user-b, namespace: ns-b}}
`, a.URL, b.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none")) // nothing from the environment
	commands := map[string][]string{
		"get":        {"get"},
		"nodes":      {"nodes"},
		"controller": {"controller", "--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--kueue", "auto"},
	}
	for _, tc := range []struct {
		name  string
		flags []string
		to    *apiServer
		token string
		as    string
	}{
		{"--kubeconfig: its current context", nil, a, "token-a", ""},
		{"--context", []string{"--context", "b"}, b, "token-b", ""},
		{"--cluster", []string{"--cluster", "cluster-b"}, b, "token-a", ""},
		{"--server", []string{"--server", b.URL}, b, "token-a", ""},
		{"--token", []string{"--token", "token-x"}, a, "token-x", ""},
		{"--as", []string{"--as", "alice"}, a, "token-a", "alice"},
	} {
		for name, cmd := range commands {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				var out, errOut bytes.Buffer
				args := append(append([]string{"--kubeconfig", kubeconfig}, tc.flags...), cmd...)
				code := run(args, cli.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
				other := a
				if tc.to == a {
					other = b
				}
				if seen := other.take(); len(seen) > 0 {
					t.Errorf("launcher %s: %d requests reached %s, which its flags do not name", strings.Join(args, " "), len(seen), other.URL)
				}
				seen := tc.to.take()
				if len(seen) == 0 {
					t.Fatalf("launcher %s (exit %d): no request reached %s\n%s", strings.Join(args, " "), code, tc.to.URL, errOut.String())
				}
				for _, h := range seen {
					if got := h.Get("Authorization"); got != "Bearer "+tc.token {
						t.Errorf("launcher %s: Authorization %q, want the token %s", strings.Join(args, " "), got, tc.token)
					}
					if got := h.Get("Impersonate-User"); got != tc.as {
						t.Errorf("launcher %s: Impersonate-User %q, want %q", strings.Join(args, " "), got, tc.as)
					}
				}
				if code == 0 || !strings.Contains(errOut.String(), tc.to.URL) {
					t.Errorf("launcher %s: exit %d, error %q; want a failure that names the server %s", strings.Join(args, " "), code, errOut.String(), tc.to.URL)
				}
			})
		}
	}
}
