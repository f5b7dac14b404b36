package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/faultline-dev/faultline/pkg/image"
)

// Release is a build of faultline's three images for this machine's platform, as `make
// images` builds them (pkg/image), and the launcher of the same version.
type Release struct {
	// Version is the version the binaries say and the images' tag.
	Version string
	// Launcher is the launcher built for the images (static, of Version): `launcher install`
	// of it renders these images.
	Launcher string
	// Images are the multi-platform indexes (of one platform here) by image name
	// (version.ControllerImageName, ...).
	Images map[string]v1.ImageIndex
}

// BuildRelease builds the binaries of the images into dir as the Makefile's images target
// does (static, but the node agent with cgo for NVML), with version v, and the images from
// them with the release's recipe.
func BuildRelease(dir, v string) (*Release, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	plugins, err := Plugins()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "linux_"+runtime.GOARCH)
	builds := map[string]string{image.LauncherBinary: "./cmd/launcher", image.BarrierBinary: "./cmd/faultline-barrier", image.AgentBinary: "./cmd/nodeagent"}
	for _, p := range plugins {
		builds[image.PluginPrefix+p] = "./plugins/" + p
	}
	ldflags := "-s -w -X github.com/faultline-dev/faultline/pkg/version.Version=" + v
	for name, pkg := range builds {
		cmd := exec.Command("go", "build", "-trimpath", "-tags", BuildTags, "-ldflags", ldflags, "-o", filepath.Join(bin, name), pkg)
		cmd.Dir = root
		cgo := "0"
		if name == image.AgentBinary {
			cgo = "1" // go-nvml
		}
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo, "GOOS=linux", "GOARCH="+runtime.GOARCH)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	platform := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	glibc, err := image.GlibcDir(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	images, err := image.BuildRelease([]image.PlatformInputs{{Platform: platform, Inputs: image.Inputs{
		Version: v, BinDir: bin, CABundle: image.DefaultCABundle, Glibc: glibc,
	}}})
	if err != nil {
		return nil, err
	}
	return &Release{Version: v, Launcher: filepath.Join(bin, image.LauncherBinary), Images: images}, nil
}

// Push pushes every image of the release to the registry, tagged with its version, but the
// ones named in skip (an image missing from the registry).
func (r *Release) Push(ctx context.Context, reg *Registry, skip ...string) error {
	for name, idx := range r.Images {
		if slices.Contains(skip, name) {
			continue
		}
		if _, err := reg.Push(ctx, name, r.Version, idx); err != nil {
			return err
		}
	}
	return nil
}
