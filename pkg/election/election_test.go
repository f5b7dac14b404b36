package election

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/faultline-dev/faultline/deploy"
)

func TestLeaseNamespace(t *testing.T) {
	inPod := func() (string, error) { return "pod-ns", nil }
	outside := func() (string, error) { return "", nil }
	unreadable := func() (string, error) { return "", errors.New("permission denied") }
	cases := map[string]struct {
		c            Config
		podNamespace func() (string, error)
		want         string
		wantErr      error
		// wantSays: phrases the error must hold, so that a person knows what to pass.
		wantSays []string
	}{
		"election off: no Lease, wherever it runs":  {c: Config{}, podNamespace: unreadable},
		"the flag wins over everything":             {c: Config{Enabled: true, LeaseNamespace: "le", WatchNamespace: "w"}, podNamespace: inPod, want: "le"},
		"one namespace watched: its Lease is there": {c: Config{Enabled: true, WatchNamespace: "w"}, podNamespace: outside, want: "w"},
		"in a pod: the pod's namespace":             {c: Config{Enabled: true}, podNamespace: inPod, want: "pod-ns"},
		"outside a cluster: refused, naming both flags": {
			c: Config{Enabled: true}, podNamespace: outside, wantErr: ErrNoLeaseNamespace,
			wantSays: []string{"outside a cluster", "--leader-election-namespace=faultline-system", "--leader-elect=false", "both act on every run"},
		},
		"the pod's namespace unreadable: refused, naming the flag": {
			c: Config{Enabled: true}, podNamespace: unreadable,
			wantSays: []string{"permission denied", "--leader-election-namespace"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := LeaseNamespace(tc.c, tc.podNamespace)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("namespace (-want +got):\n%s", diff)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if (err != nil) != (len(tc.wantSays) > 0) {
				t.Fatalf("error %v, want one: %v", err, len(tc.wantSays) > 0)
			}
			for _, s := range tc.wantSays {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not say %q: %v", s, err)
				}
			}
		})
	}
}

// TestInstallNamespaceIsTheDeployedLease: the refusal tells a person to join the election of
// the installed controller through InstallNamespace, which must be where that controller
// keeps its Lease.
func TestInstallNamespaceIsTheDeployedLease(t *testing.T) {
	manifest, err := deploy.FS.ReadFile("controller/controller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if flag := "--" + FlagLeaseNamespace + "=" + InstallNamespace; !strings.Contains(string(manifest), flag) {
		t.Errorf("deploy/controller/controller.yaml does not pass %s: the installed controller's Lease is elsewhere", flag)
	}
}
