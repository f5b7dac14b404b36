package image

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/pkg/version"
)

// What goes into each of a release's three images.
//
//   - controller (version.ControllerImageName): the launcher, run as `launcher controller`,
//     with the framework plugins beside it in /usr/local/bin (where the controller looks for
//     them); static (CGO_ENABLED=0); user nonroot (65532).
//   - node agent (version.AgentImageName): nodeagent, user root (logind grants delay
//     inhibitor locks to root; the DaemonSet runs it privileged for NVML's device nodes). It is
//     built with cgo: go-nvml binds NVML through cgo and dlopen()s libnvidia-ml.so.1 from the
//     node's driver (--driver-root) at run time. The driver's library is linked against the GNU
//     C library, so the image holds glibc's runtime (the loader, libc, and the libm, libdl,
//     libpthread and librt that libnvidia-ml names), taken from this machine's Debian libc6
//     (libc6-arm64-cross for arm64): distroless's "base" content, no shell, no package manager.
//   - barrier (version.BarrierImageName): faultline-barrier at barrier.Binary, static, user
//     barrier.ImageUser (65532); it needs no privilege (package barrier says why).
//
// Every image has a root and a nonroot user in /etc/passwd and /etc/group, /tmp (1777), and
// the CA bundle of this machine's Debian ca-certificates (for an OTLP endpoint over TLS; the
// API server's CA comes with the service account's token). Labels: org.opencontainers.image.*
// with the version, the commit and the license.

// Platforms are the platforms a release is built for.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Binary names in a platform's binary directory, as the Makefile builds them.
const (
	LauncherBinary = "launcher"
	AgentBinary    = "nodeagent"
	BarrierBinary  = "faultline-barrier"
	// PluginPrefix begins every framework plugin's binary (faultline-plugin-jax, ...).
	PluginPrefix = "faultline-plugin-"
)

// Where the images hold their programs.
const (
	binDir = "/usr/local/bin"
	// NonRoot is distroless's nonroot user and group, which the controller and the barrier
	// run as.
	NonRoot = 65532
)

// Inputs are what one platform's images are made from.
type Inputs struct {
	// Version and Revision label the images (version.Version, the commit).
	Version, Revision string
	// BinDir holds the platform's binaries: launcher, nodeagent, faultline-barrier and
	// faultline-plugin-<framework>.
	BinDir string
	// CABundle is a PEM bundle of CA certificates (DefaultCABundle).
	CABundle string
	// Glibc is the directory of the platform's GNU C library (GlibcDir), for the agent.
	Glibc string
}

// DefaultCABundle is where Debian's ca-certificates puts its bundle.
const DefaultCABundle = "/etc/ssl/certs/ca-certificates.crt"

// glibc is what the agent's image holds of the GNU C library of a platform: where the loader
// is looked for (the executable's interpreter), and the libraries.
type glibc struct {
	triplet, loader, interpreter string
}

var glibcOf = map[string]glibc{
	"amd64": {"x86_64-linux-gnu", "ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2"},
	"arm64": {"aarch64-linux-gnu", "ld-linux-aarch64.so.1", "/lib/ld-linux-aarch64.so.1"},
}

// glibcLibraries are the libraries besides the loader: libc for the agent, and what
// libnvidia-ml.so.1 names (NEEDED) of glibc.
var glibcLibraries = []string{"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}

// GlibcDir is where this machine (Debian) has the GNU C library of arch: its own under
// /lib/<triplet>, another architecture's from the cross package (libc6-arm64-cross) under
// /usr/<triplet>/lib.
func GlibcDir(arch string) (string, error) {
	g, ok := glibcOf[arch]
	if !ok {
		return "", fmt.Errorf("no glibc layout known for %s", arch)
	}
	for _, d := range []string{"/lib/" + g.triplet, "/usr/" + g.triplet + "/lib"} {
		if _, err := os.Stat(filepath.Join(d, g.loader)); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("the GNU C library of %s is not on this machine (neither /lib/%s nor /usr/%s/lib holds %s): apt-get install libc6-%s-cross",
		arch, g.triplet, g.triplet, g.loader, arch)
}

// Release are the three images of platform p, in the order controller, agent, barrier.
func Release(p v1.Platform, in Inputs) ([]Spec, error) {
	var out []Spec
	for _, f := range []func(v1.Platform, Inputs) (Spec, error){ControllerSpec, AgentSpec, BarrierSpec} {
		s, err := f(p, in)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// binary is the path of the platform's binary name in in.BinDir, which must exist.
func binary(p v1.Platform, in Inputs, name string) (string, error) {
	if p.OS != "linux" {
		return "", fmt.Errorf("platform %s: faultline's images are linux images", platformString(p))
	}
	f := filepath.Join(in.BinDir, name)
	if _, err := os.Stat(f); err != nil {
		return "", fmt.Errorf("%s of %s: %w (make images builds it)", name, platformString(p), err)
	}
	return f, nil
}

// env is every image's environment.
var env = []string{"PATH=" + binDir + ":/usr/bin:/bin", "SSL_CERT_FILE=" + DefaultCABundle}

// ControllerSpec is the controller's image of platform p: the launcher and every
// faultline-plugin-* of in.BinDir.
func ControllerSpec(p v1.Platform, in Inputs) (Spec, error) {
	launcher, err := binary(p, in, LauncherBinary)
	if err != nil {
		return Spec{}, err
	}
	plugins, err := filepath.Glob(filepath.Join(in.BinDir, PluginPrefix+"*"))
	if err != nil {
		return Spec{}, err
	}
	if len(plugins) == 0 {
		return Spec{}, fmt.Errorf("no %s* in %s: the controller's image ships the framework plugins", PluginPrefix, in.BinDir)
	}
	slices.Sort(plugins)
	files, err := baseFiles(in.CABundle)
	if err != nil {
		return Spec{}, err
	}
	files = append(files, File{Path: binDir + "/" + LauncherBinary, Source: launcher, Mode: 0o755})
	for _, pl := range plugins {
		files = append(files, File{Path: binDir + "/" + filepath.Base(pl), Source: pl, Mode: 0o755})
	}
	return Spec{
		Name: version.ControllerImageName, Platform: p, Files: files,
		Entrypoint: []string{binDir + "/" + LauncherBinary}, Cmd: []string{"controller"},
		Env: append(slices.Clone(env), "HOME=/home/nonroot"), User: nonRootUser, WorkingDir: "/home/nonroot",
		Labels: labels(in, version.ControllerImageName, "faultline's controller (launcher controller) with the framework plugins"),
	}, nil
}

// AgentSpec is the node agent's image of platform p, with the GNU C library of in.Glibc.
func AgentSpec(p v1.Platform, in Inputs) (Spec, error) {
	agent, err := binary(p, in, AgentBinary)
	if err != nil {
		return Spec{}, err
	}
	g, ok := glibcOf[p.Architecture]
	if !ok {
		return Spec{}, fmt.Errorf("platform %s: no glibc layout known for the agent's image", platformString(p))
	}
	if in.Glibc == "" {
		return Spec{}, fmt.Errorf("platform %s: Inputs.Glibc is required (the agent is built with cgo)", platformString(p))
	}
	files, err := baseFiles(in.CABundle)
	if err != nil {
		return Spec{}, err
	}
	files = append(files,
		File{Path: binDir + "/" + AgentBinary, Source: agent, Mode: 0o755},
		File{Path: "/lib/" + g.triplet + "/" + g.loader, Source: filepath.Join(in.Glibc, g.loader), Mode: 0o755})
	for _, l := range glibcLibraries {
		files = append(files, File{Path: "/lib/" + g.triplet + "/" + l, Source: filepath.Join(in.Glibc, l), Mode: 0o755})
	}
	files = append(files, File{Path: g.interpreter, Link: "/lib/" + g.triplet + "/" + g.loader})
	return Spec{
		Name: version.AgentImageName, Platform: p, Files: files,
		Entrypoint: []string{binDir + "/" + AgentBinary},
		Env:        slices.Clone(env), User: "0:0", WorkingDir: "/",
		Labels: labels(in, version.AgentImageName, "faultline's node agent: logind shutdowns and NVML GPU faults as evidence on training pods"),
	}, nil
}

// BarrierSpec is faultline-barrier's image of platform p.
func BarrierSpec(p v1.Platform, in Inputs) (Spec, error) {
	bin, err := binary(p, in, BarrierBinary)
	if err != nil {
		return Spec{}, err
	}
	if barrier.ImageUser != nonRootUser {
		return Spec{}, fmt.Errorf("barrier.ImageUser is %s, the images' nonroot user %s", barrier.ImageUser, nonRootUser)
	}
	files, err := baseFiles(in.CABundle)
	if err != nil {
		return Spec{}, err
	}
	return Spec{
		Name: version.BarrierImageName, Platform: p, Files: append(files, File{Path: barrier.Binary, Source: bin, Mode: 0o755}),
		Entrypoint: []string{barrier.Binary},
		Env:        slices.Clone(env), User: barrier.ImageUser, WorkingDir: "/",
		Labels: labels(in, version.BarrierImageName, "faultline-barrier: holds a gang's workers until their attempt opens"),
	}, nil
}

// nonRootUser is NonRoot as an image's USER.
var nonRootUser = fmt.Sprintf("%d:%d", NonRoot, NonRoot)

// baseFiles are in every image: users, groups, /tmp, nonroot's home and the CA bundle.
func baseFiles(caBundle string) ([]File, error) {
	if caBundle == "" {
		return nil, fmt.Errorf("Inputs.CABundle is required (%s, Debian's ca-certificates)", DefaultCABundle)
	}
	if _, err := os.Stat(caBundle); err != nil {
		return nil, fmt.Errorf("CA bundle: %w (apt-get install ca-certificates)", err)
	}
	return []File{
		{Path: "/etc/passwd", Data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot))},
		{Path: "/etc/group", Data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot))},
		{Path: "/etc/ssl/certs/ca-certificates.crt", Source: caBundle},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: NonRoot, GID: NonRoot},
		{Path: "/root", Dir: true, Mode: 0o700},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
	}, nil
}

// labels are the OCI annotations' keys as config labels (image-spec annotations.md).
func labels(in Inputs, name, description string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       name,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.version":     in.Version,
		"org.opencontainers.image.source":      version.Source,
		"org.opencontainers.image.licenses":    version.License,
		"org.opencontainers.image.vendor":      "faultline",
	}
	if in.Revision != "" {
		l["org.opencontainers.image.revision"] = in.Revision
	}
	return l
}

// Ref is the reference of image name of version v under registry.
func Ref(registry, name, v string) string {
	return version.ImageRef(strings.TrimSuffix(registry, "/"), name, v)
}

// PlatformInputs are the inputs of one platform's images.
type PlatformInputs struct {
	Platform v1.Platform
	Inputs
}

// BuildRelease builds the three images for every platform and returns, by image name
// (version.ControllerImageName, ...), the multi-platform index of each.
func BuildRelease(platforms []PlatformInputs) (map[string]v1.ImageIndex, error) {
	byName := map[string][]v1.Image{}
	var names []string
	for _, p := range platforms {
		specs, err := Release(p.Platform, p.Inputs)
		if err != nil {
			return nil, err
		}
		for _, s := range specs {
			img, err := Build(s)
			if err != nil {
				return nil, err
			}
			if _, ok := byName[s.Name]; !ok {
				names = append(names, s.Name)
			}
			byName[s.Name] = append(byName[s.Name], img)
		}
	}
	out := map[string]v1.ImageIndex{}
	for _, n := range names {
		idx, err := Index(byName[n]...)
		if err != nil {
			return nil, err
		}
		out[n] = idx
	}
	return out, nil
}
