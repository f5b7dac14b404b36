package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/pkg/version"
)

var amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}

// writeFiles writes name → content under dir, each with modification time at.
func writeFiles(t *testing.T, dir string, at time.Time, files map[string]string) {
	t.Helper()
	for n, content := range files {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

func digestOf(t *testing.T, d interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// TestBuildIsReproducible: the same files give the same digest whatever their times, modes
// on this machine and the order they are given in; a changed byte gives another.
func TestBuildIsReproducible(t *testing.T) {
	build := func(at time.Time, content string, reverse bool) string {
		dir := t.TempDir()
		writeFiles(t, dir, at, map[string]string{"a": content, "b": "bee"})
		files := []File{{Path: "/usr/local/bin/a", Source: filepath.Join(dir, "a"), Mode: 0o755}, {Path: "/b", Source: filepath.Join(dir, "b")}}
		if reverse {
			files[0], files[1] = files[1], files[0]
		}
		img, err := Build(Spec{Name: "x", Platform: amd64, Files: files, Entrypoint: []string{"/usr/local/bin/a"}, User: "65532:65532"})
		if err != nil {
			t.Fatal(err)
		}
		return digestOf(t, img)
	}
	first := build(time.Now(), "binary", false)
	if again := build(time.Now().Add(-48*time.Hour), "binary", true); again != first {
		t.Errorf("the same files an other time and order: %s, first %s", again, first)
	}
	if other := build(time.Now(), "binarY", false); other == first {
		t.Errorf("a changed file kept the digest %s", first)
	}
}

// TestBuildImage: the layer holds the files with the directories above them, in path order,
// at the epoch, owned as given; the config has the platform, the runtime settings and the
// labels.
func TestBuildImage(t *testing.T) {
	img, err := Build(Spec{
		Name: "x", Platform: v1.Platform{OS: "linux", Architecture: "arm64"},
		Files: []File{
			{Path: "/usr/local/bin/prog", Data: []byte("#!"), Mode: 0o755},
			{Path: "/tmp", Dir: true, Mode: 0o1777},
			{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
			{Path: "/lib64/ld.so", Link: "/lib/ld.so"},
		},
		Entrypoint: []string{"/usr/local/bin/prog"}, Cmd: []string{"run"}, User: "65532:65532", Env: []string{"PATH=/usr/local/bin"},
		Labels: map[string]string{"org.opencontainers.image.licenses": "Apache-2.0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" || !cf.Created.Time.Equal(Epoch) {
		t.Errorf("config: os %s arch %s created %s; want linux, arm64, the epoch", cf.OS, cf.Architecture, cf.Created)
	}
	want := v1.Config{Entrypoint: []string{"/usr/local/bin/prog"}, Cmd: []string{"run"}, User: "65532:65532", Env: []string{"PATH=/usr/local/bin"},
		Labels: map[string]string{"org.opencontainers.image.licenses": "Apache-2.0"}}
	if diff := cmp.Diff(want, cf.Config); diff != "" {
		t.Errorf("runtime config (-want +got):\n%s", diff)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Config.MediaType != "application/vnd.oci.image.config.v1+json" ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Errorf("manifest: %+v; want OCI media types and one gzip layer", m)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(Epoch) {
			t.Errorf("%s: time %s, want the epoch", h.Name, h.ModTime)
		}
		got = append(got, h.Name+" "+os.FileMode(h.Mode).String()+" "+h.Linkname+" "+strconv.Itoa(h.Uid))
	}
	wantEntries := []string{
		"home/ -rwxr-xr-x  0", "home/nonroot/ -rwx------  65532", "lib64/ -rwxr-xr-x  0", "lib64/ld.so -rwxrwxrwx /lib/ld.so 0",
		"tmp/ -rwxrwxrwx  0", "usr/ -rwxr-xr-x  0", "usr/local/ -rwxr-xr-x  0", "usr/local/bin/ -rwxr-xr-x  0", "usr/local/bin/prog -rwxr-xr-x  0",
	}
	if diff := cmp.Diff(wantEntries, got); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
}

func TestBuildRefusesBadPaths(t *testing.T) {
	for name, files := range map[string][]File{
		"relative":        {{Path: "etc/passwd"}},
		"unclean":         {{Path: "/etc/../passwd"}},
		"twice":           {{Path: "/a"}, {Path: "/a"}},
		"below a file":    {{Path: "/a"}, {Path: "/a/b"}},
		"missing source":  {{Path: "/a", Source: "/nonexistent/file"}},
		"the root itself": {{Path: "/", Dir: true}},
	} {
		if _, err := Build(Spec{Name: "x", Platform: amd64, Files: files}); err == nil {
			t.Errorf("%s: built", name)
		}
	}
	if _, err := Build(Spec{Name: "x", Files: []File{{Path: "/a"}}}); err == nil {
		t.Error("no platform: built")
	}
}

// fakeRelease writes what Release reads for one platform: binaries, a glibc directory and a
// CA bundle (their contents stand for theirs).
func fakeRelease(t *testing.T, arch string) Inputs {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, filepath.Join(dir, "bin"), time.Now(), map[string]string{
		LauncherBinary: "launcher " + arch, AgentBinary: "agent " + arch, BarrierBinary: "barrier " + arch,
		PluginPrefix + "jax": "jax", PluginPrefix + "tensorflow": "tf",
	})
	libs := map[string]string{glibcOf[arch].loader: "ld"}
	for _, l := range glibcLibraries {
		libs[l] = l
	}
	writeFiles(t, filepath.Join(dir, "glibc"), time.Now(), libs)
	writeFiles(t, dir, time.Now(), map[string]string{"ca.crt": "-----BEGIN CERTIFICATE-----"})
	return Inputs{Version: "v1.2.3", Revision: "abc123", BinDir: filepath.Join(dir, "bin"), Glibc: filepath.Join(dir, "glibc"), CABundle: filepath.Join(dir, "ca.crt")}
}

// TestReleaseImages: three multi-platform images (amd64, arm64), each from its own binaries,
// the controller and the barrier nonroot, the agent root with glibc, every image labelled
// with the version and the license; built twice, the same digests.
func TestReleaseImages(t *testing.T) {
	inputs := []PlatformInputs{{Platform: Platforms[0], Inputs: fakeRelease(t, "amd64")}, {Platform: Platforms[1], Inputs: fakeRelease(t, "arm64")}}
	indexes, err := BuildRelease(inputs)
	if err != nil {
		t.Fatal(err)
	}
	again, err := BuildRelease(inputs)
	if err != nil {
		t.Fatal(err)
	}
	wantUser := map[string]string{version.ControllerImageName: "65532:65532", version.AgentImageName: "0:0", version.BarrierImageName: barrier.ImageUser}
	wantFile := map[string]string{version.ControllerImageName: "usr/local/bin/faultline-plugin-jax", version.AgentImageName: "lib/%s/libc.so.6", version.BarrierImageName: strings.TrimPrefix(barrier.Binary, "/")}
	if len(indexes) != 3 {
		t.Fatalf("images %v, want the controller, the agent and the barrier", len(indexes))
	}
	for name, idx := range indexes {
		if d1, d2 := digestOf(t, idx), digestOf(t, again[name]); d1 != d2 {
			t.Errorf("%s: built twice, digests %s and %s", name, d1, d2)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var plats []string
		for _, d := range im.Manifests {
			plats = append(plats, d.Platform.String())
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, _ := img.ConfigFile()
			if cf.Config.User != wantUser[name] {
				t.Errorf("%s %s: user %q, want %q", name, d.Platform, cf.Config.User, wantUser[name])
			}
			for k, v := range map[string]string{"org.opencontainers.image.licenses": "Apache-2.0", "org.opencontainers.image.version": "v1.2.3", "org.opencontainers.image.revision": "abc123"} {
				if cf.Config.Labels[k] != v {
					t.Errorf("%s %s: label %s=%q, want %q", name, d.Platform, k, cf.Config.Labels[k], v)
				}
			}
			files := layerFiles(t, img)
			want := strings.Replace(wantFile[name], "%s", glibcOf[d.Platform.Architecture].triplet, 1)
			if _, ok := files[want]; !ok {
				t.Errorf("%s %s: no %s in %v", name, d.Platform, want, files)
			}
			if _, ok := files["etc/ssl/certs/ca-certificates.crt"]; !ok {
				t.Errorf("%s %s: no CA bundle", name, d.Platform)
			}
			if name == version.AgentImageName {
				if link := files[strings.TrimPrefix(glibcOf[d.Platform.Architecture].interpreter, "/")]; link == "" {
					t.Errorf("agent %s: no program interpreter %s", d.Platform, glibcOf[d.Platform.Architecture].interpreter)
				}
			}
			// Each platform's image holds that platform's binaries.
			arch := d.Platform.Architecture
			if name == version.ControllerImageName && files["usr/local/bin/launcher"] != "launcher "+arch {
				t.Errorf("controller %s: launcher %q", d.Platform, files["usr/local/bin/launcher"])
			}
		}
		if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, plats); diff != "" {
			t.Errorf("%s platforms (-want +got):\n%s", name, diff)
		}
	}
}

// layerFiles is the layer's regular files (content) and links (target) by path.
func layerFiles(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			b, _ := io.ReadAll(tr)
			out[h.Name] = string(b)
		case tar.TypeSymlink:
			out[h.Name] = "-> " + h.Linkname
		}
	}
}

func TestReleaseNeedsItsInputs(t *testing.T) {
	in := fakeRelease(t, "amd64")
	for name, mutate := range map[string]func(*Inputs){
		"no launcher": func(i *Inputs) { os.Remove(filepath.Join(i.BinDir, LauncherBinary)) },
		"no plugins": func(i *Inputs) {
			os.Remove(filepath.Join(i.BinDir, PluginPrefix+"jax"))
			os.Remove(filepath.Join(i.BinDir, PluginPrefix+"tensorflow"))
		},
		"no glibc":     func(i *Inputs) { i.Glibc = "" },
		"no CA bundle": func(i *Inputs) { i.CABundle = "" },
	} {
		i := fakeRelease(t, "amd64")
		mutate(&i)
		if _, err := Release(amd64, i); err == nil {
			t.Errorf("%s: released", name)
		}
	}
	if _, err := Release(v1.Platform{OS: "linux", Architecture: "s390x"}, in); err == nil {
		t.Error("s390x: released without a glibc layout")
	}
}

// TestPushAndPull: the images pushed to a registry (go-containerregistry's, on the loopback)
// come back with the same digests, by tag, for each platform.
func TestPushAndPull(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	indexes, err := BuildRelease([]PlatformInputs{{Platform: Platforms[0], Inputs: fakeRelease(t, "amd64")}, {Platform: Platforms[1], Inputs: fakeRelease(t, "arm64")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for n, idx := range indexes {
		ref := Ref(host, n, "v1.2.3")
		if err := Push(ctx, ref, idx, true); err != nil {
			t.Fatal(err)
		}
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Index(r, remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
		if a, b := digestOf(t, got), digestOf(t, idx); a != b {
			t.Errorf("%s: pulled %s, pushed %s", ref, a, b)
		}
		img, err := remote.Image(r, remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
		if err != nil {
			t.Fatal(err)
		}
		if cf, _ := img.ConfigFile(); cf.Architecture != "arm64" {
			t.Errorf("%s for arm64: %s", ref, cf.Architecture)
		}
	}
}

// TestArchives: an image archive for `ctr images import` is an OCI layout named by the
// reference, the same bytes each time; a layout of a multi-platform index reads back.
func TestArchives(t *testing.T) {
	img, err := Build(Spec{Name: "x", Platform: amd64, Files: []File{{Path: "/pause", Data: []byte("p"), Mode: 0o755}}, Entrypoint: []string{"/pause"}})
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := WriteArchive(&a, "localhost/faultline/pause:dev", img); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(&b, "localhost/faultline/pause:dev", img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same image archived twice differs")
	}
	tr := tar.NewReader(&a)
	var index string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "index.json" {
			raw, _ := io.ReadAll(tr)
			index = string(raw)
		}
	}
	for _, want := range []string{`"io.containerd.image.name": "localhost/faultline/pause:dev"`, `"org.opencontainers.image.ref.name": "dev"`} {
		if !strings.Contains(index, want) {
			t.Errorf("index.json lacks %s: %s", want, index)
		}
	}

	idx, err := Index(img)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(dir, "example.com/faultline:v1", idx); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	om, _ := outer.IndexManifest()
	if len(om.Manifests) != 1 || om.Manifests[0].Digest.String() != digestOf(t, idx) || om.Manifests[0].Annotations[AnnotationRefName] != "v1" {
		t.Errorf("layout index: %+v, want the image's index tagged v1", om.Manifests)
	}
}

// TestReleaseOfRealBinariesIsReproducible: the barrier built twice by `go build` as `make
// images` builds it (static, -trimpath) gives the same image digest: what makes the release's
// digests the same from the same commit.
func TestReleaseOfRealBinariesIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds faultline-barrier twice")
	}
	var digests []string
	for range 2 {
		out := filepath.Join(t.TempDir(), BarrierBinary)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -X github.com/faultline-dev/faultline/pkg/version.Version=v9.9.9", "-o", out, "../../cmd/faultline-barrier")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
		img, err := Build(Spec{Name: version.BarrierImageName, Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
			Files: []File{{Path: barrier.Binary, Source: out, Mode: 0o755}}, Entrypoint: []string{barrier.Binary}, User: barrier.ImageUser})
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, digestOf(t, img))
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the barrier: image digests %s and %s", digests[0], digests[1])
	}
}
