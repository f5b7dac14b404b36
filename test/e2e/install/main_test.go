// Package install runs `launcher install` and `launcher uninstall` against a control plane
// that cannot take faultline's default installation: kube-apiserver (the newest pinned) with the
// MutatingAdmissionPolicy API turned off (--runtime-config), as a cluster before 1.36 is.
package install

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/faultline-dev/faultline/test/cluster"
)

// launcherBin is the launcher that TestMain builds.
var launcherBin string

// noMutatingPolicies turn the MutatingAdmissionPolicy API (GA in 1.36) off, and its admission
// plugin with it: the plugin waits for its informers of the API, and the API server would
// never become ready.
var noMutatingPolicies = []string{
	"kube-apiserver=runtime-config=admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false",
	"kube-apiserver=disable-admission-plugins=MutatingAdmissionPolicy",
}

func TestMain(m *testing.M) {
	flag.Parse()
	var binDir string
	if !testing.Short() {
		var err error
		if binDir, err = os.MkdirTemp("", "faultline-install-e2e-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if launcherBin, err = cluster.BuildBinary(binDir, "./cmd/launcher", ""); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(binDir)
			os.Exit(1)
		}
	}
	code := cluster.Main(m, cluster.Options{Name: "install", ExtraArgs: noMutatingPolicies})
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
