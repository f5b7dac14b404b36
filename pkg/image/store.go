package image

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Annotations of an image layout's index that name an image: its tag (OCI) and the full
// reference containerd imports it under (`ctr images import`).
const (
	AnnotationRefName        = "org.opencontainers.image.ref.name"
	AnnotationContainerdName = "io.containerd.image.name"
)

// WriteLayout writes idx as an OCI image layout in dir (created, or replaced), named ref in
// its index.json: what `make images` leaves in _output/images/<name>, and what skopeo, crane
// and `ctr images import` read.
func WriteLayout(dir, ref string, idx v1.ImageIndex) error {
	tag, err := name.NewTag(ref, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		AnnotationRefName: tag.TagStr(), AnnotationContainerdName: ref,
	}))
}

// WriteArchive writes img as an OCI image layout tarball named ref, the form `ctr -n k8s.io
// images import` loads into a node's containerd. The tar's entries are in path order with the
// epoch's times: the same image gives the same archive.
func WriteArchive(w io.Writer, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	dir, err := os.MkdirTemp("", "faultline-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		AnnotationRefName: tag.TagStr(), AnnotationContainerdName: ref,
	})); err != nil {
		return err
	}
	return tarDir(w, dir)
}

// WriteArchiveFile is WriteArchive into the file path.
func WriteArchiveFile(path, ref string, img v1.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteArchive(f, ref, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tarDir writes the files below dir as a tar, in path order, with the epoch's times.
func tarDir(w io.Writer, dir string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.IsDir() {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o755, ModTime: Epoch}); err != nil {
				return err
			}
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), ModTime: Epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// Push pushes idx to the registry as ref, with the credentials of the Docker config
// (~/.docker/config.json, `docker login` or `crane auth login`). insecure allows a registry
// served over plain HTTP (a local one, as the tests run).
func Push(ctx context.Context, ref string, idx v1.ImageIndex, insecure bool) error {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.WriteIndex(r, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// Digest is idx's digest as a reference takes it ("sha256:…").
func Digest(idx v1.ImageIndex) (string, error) {
	h, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return h.String(), nil
}
