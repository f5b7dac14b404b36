// Package version holds the build's version and what follows from it: the license, and the
// three images of the same version that a release is made of (the controller with the
// framework plugins, the node agent, the barrier).
//
// One version, from the tag: Go records the main module's version in every binary it builds
// from a git checkout (the tag at HEAD, v0.3.0; after it, a pseudo-version that names the
// next patch, the time and the commit, v0.3.1-0.20261207091256-9353d4b6c0ab; "+dirty" when
// the tree was modified), and `go install ...@v0.3.0` records v0.3.0. The launcher, the
// agent, the plugins and the images all read it here, and the Makefile asks the same of the
// tree (hack/version) for the images' tags and the release's manifests.
package version

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// Dev is the version of a build that has none: from a tree with no release tag in its
// history, or built without version control information (-buildvcs=false, a tree without
// .git). Its launcher installs the images tagged dev that `make images` built beside it.
const Dev = "dev"

// Version is the faultline release, e.g. v0.1.0: the one the build was given (-ldflags -X,
// which wins), else the one Go recorded (see the package doc), else Dev.
var Version = Dev

// Revision is the commit the build is of: the one given (-ldflags -X), else the one Go
// recorded; empty without version control information.
var Revision = ""

// Modified: the build's tree had changes not committed (Go's vcs.modified).
var Modified = false

func init() {
	if info, ok := debug.ReadBuildInfo(); ok {
		Version, Revision, Modified = fromBuild(Version, Revision, info)
	}
}

// fromBuild is the version and revision a binary reports: given ones win; else what Go
// recorded of the main module and its checkout. A pseudo-version with no tag before it
// (v0.0.0-…) is Dev: a tree that was never released. Pure.
func fromBuild(given, revision string, info *debug.BuildInfo) (string, string, bool) {
	v := given
	if v == Dev {
		if m := info.Main.Version; m != "" && m != "(devel)" && !strings.HasPrefix(m, "v0.0.0-") {
			v = m
		}
	}
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if revision == "" {
				revision = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return v, revision, modified
}

// License is faultline's license, as an SPDX identifier (the repository's LICENSE).
const License = "Apache-2.0"

// Source is faultline's repository, as the images' labels name it.
const Source = "https://github.com/faultline-dev/faultline"

// DefaultRegistry is where releases are pushed; `launcher install --registry` moves all three
// images at once.
const DefaultRegistry = "ghcr.io/faultline-dev"

// The images' repositories under a registry.
const (
	// ControllerImageName is the launcher, run as `launcher controller`, with the framework
	// plugins beside it.
	ControllerImageName = "faultline"
	// AgentImageName is the node agent of the DaemonSet.
	AgentImageName = "faultline-nodeagent"
	// BarrierImageName is faultline-barrier, the init container of the workers that restart
	// in place; the controller names it in the pods it builds.
	BarrierImageName = "faultline-barrier"
)

// Images are the references of one version's three images.
type Images struct {
	Controller, Agent, Barrier string
}

// ImagesOf are the images of version v under registry ("" is DefaultRegistry), tagged
// with Tag(v): what `launcher install` of that version renders.
func ImagesOf(registry, v string) Images {
	if registry == "" {
		registry = DefaultRegistry
	}
	registry = strings.TrimSuffix(registry, "/")
	return Images{
		Controller: ImageRef(registry, ControllerImageName, v),
		Agent:      ImageRef(registry, AgentImageName, v),
		Barrier:    ImageRef(registry, BarrierImageName, v),
	}
}

// ImageRef is the reference of image name of version v under registry.
func ImageRef(registry, name, v string) string {
	return registry + "/" + name + ":" + Tag(v)
}

// Tag is the images' tag for version v: the version itself, as `make images` tags what it
// builds, so that a development build's launcher installs the images built beside it. An
// OCI tag is at most 128 of [A-Za-z0-9_.-], not starting with . or -; any other character of
// v (a "+" of semver build metadata) becomes "-". An empty version is "dev".
func Tag(v string) string {
	if v == "" {
		return "dev"
	}
	t := notInTag.ReplaceAllString(v, "-")
	if t[0] == '.' || t[0] == '-' {
		t = "v" + t
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}

var notInTag = regexp.MustCompile(`[^A-Za-z0-9_.-]`)
