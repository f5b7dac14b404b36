// Package image builds faultline's container images, OCI images made with
// go-containerregistry (the library ko is built on) from binaries built on this machine: no
// Dockerfile, no container engine, no base image pulled. An image is one layer whose tar is
// written in path order with every timestamp at the Unix epoch and every owner numeric, so the
// same files give the same digest on any machine and at any time (`make images` twice from one
// commit: the same digests). release.go is what goes into each of the three images.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is every timestamp in an image (the config's created, the history's, the files'):
// a build's time would make every build's digest different.
var Epoch = time.Unix(0, 0).UTC()

// File is one entry of an image's filesystem: a regular file (from Source on this machine,
// else Data), a directory (Dir) or a symbolic link (Link).
type File struct {
	// Path is absolute, e.g. "/usr/local/bin/launcher".
	Path string
	// Source is a file on this machine whose content the image holds (links followed).
	Source string
	// Data is the content when Source is empty.
	Data []byte
	// Dir makes the entry a directory; Link a symbolic link to Link.
	Dir  bool
	Link string
	// Mode is the permission bits (with the sticky bit for /tmp); 0 is 0644 for a file,
	// 0755 for a directory.
	Mode int64
	// UID and GID own the entry (0, root, unless set).
	UID, GID int
}

// Spec is a one-layer image for one platform.
type Spec struct {
	// Name is the image's repository under a registry, e.g. "faultline-barrier".
	Name     string
	Platform v1.Platform
	Files    []File
	// The runtime configuration: ENTRYPOINT, CMD, ENV, USER ("uid:gid") and WORKDIR.
	Entrypoint, Cmd, Env []string
	User, WorkingDir     string
	// Labels are the config's labels (org.opencontainers.image.*).
	Labels map[string]string
}

// Build makes the image of s. Its digest depends only on s and the files' contents.
func Build(s Spec) (v1.Image, error) {
	if s.Platform.OS == "" || s.Platform.Architecture == "" {
		return nil, fmt.Errorf("image %s: platform needs an OS and an architecture", s.Name)
	}
	data, err := layerTar(s.Files)
	if err != nil {
		return nil, fmt.Errorf("image %s (%s): %w", s.Name, platformString(s.Platform), err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: Epoch}, CreatedBy: "faultline pkg/image: " + s.Name, Comment: "one layer, files at the epoch",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: Epoch}
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = s.Platform.OS, s.Platform.Architecture, s.Platform.Variant, s.Platform.OSVersion
	cf.Config = v1.Config{
		Entrypoint: s.Entrypoint, Cmd: s.Cmd, Env: s.Env, User: s.User, WorkingDir: s.WorkingDir, Labels: s.Labels,
	}
	return mutate.ConfigFile(img, cf)
}

// Index is the multi-platform image of images, each described by its config's platform.
func Index(images ...v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		p := cf.Platform()
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	return mutate.AppendManifests(idx, adds...), nil
}

// layerTar is the uncompressed layer of files: in path order, with the directories above each
// entry (root's, 0755) unless given, every time the epoch, owners numeric only.
func layerTar(files []File) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("image path %q: want an absolute, clean path below /", f.Path)
		}
		if _, dup := byPath[f.Path]; dup {
			return nil, fmt.Errorf("image path %s given twice", f.Path)
		}
		byPath[f.Path] = f
	}
	for _, f := range files {
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if g, ok := byPath[d]; ok {
				if !g.Dir {
					return nil, fmt.Errorf("image path %s is below %s, which is not a directory", f.Path, d)
				}
				continue
			}
			byPath[d] = File{Path: d, Dir: true}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: Epoch}
		var data []byte
		switch {
		case f.Dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			if hdr.Mode == 0 {
				hdr.Mode = 0o755
			}
		case f.Link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			data = f.Data
			if f.Source != "" {
				var err error
				if data, err = os.ReadFile(f.Source); err != nil {
					return nil, fmt.Errorf("image path %s: %w", p, err)
				}
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
			if hdr.Mode == 0 {
				hdr.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}
