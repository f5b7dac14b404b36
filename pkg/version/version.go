// Package version holds the build's version, set by the Makefile through -ldflags, and what
// follows from it: the license, and the three images of the same version that a release is
// made of (the controller with the framework plugins, the node agent, the barrier).
package version

import (
	"regexp"
	"strings"
)

// Version is the faultline release, e.g. v0.1.0 or a git describe string.
var Version = "dev"

// Revision is the commit the build is of (the Makefile sets it; empty for a plain go build).
var Revision = ""

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
