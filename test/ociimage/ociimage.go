// Package ociimage writes a container image that holds static binaries as an OCI image
// layout tarball, the form `ctr images import` loads. The real nodes of the test substrate
// have no registry to pull from: their images (the sandbox's pause and the test worker) are
// built from Go programs of this repository and imported into each node's containerd.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image specification (image-spec v1.1).
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"

	// annotationRefName is the tag of a manifest in an image layout's index;
	// annotationContainerdName is the full reference containerd names the imported image by.
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// Image is a one-layer image.
type Image struct {
	// Ref is the image's full reference as a pod names it after normalisation, e.g.
	// "docker.io/library/faultline-test-worker:latest" for "faultline-test-worker:latest".
	Ref string
	// Files maps a path in the image (e.g. "/worker") to a file on this machine; each is
	// copied with mode 0755.
	Files map[string]string
	// Entrypoint is the image's ENTRYPOINT.
	Entrypoint []string
	// User is the image's USER ("uid" or "uid:gid"); empty runs as root unless the pod says
	// otherwise.
	User string
}

// epoch is every timestamp in the image, so that the same binaries give the same digests.
var epoch = time.Unix(0, 0).UTC()

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Write writes img as an OCI image layout tarball to w.
func Write(w io.Writer, img Image) error {
	if img.Ref == "" || len(img.Files) == 0 || len(img.Entrypoint) == 0 {
		return fmt.Errorf("image %q: Ref, Files and Entrypoint are required", img.Ref)
	}
	tag := img.Ref[strings.LastIndex(img.Ref, ":")+1:]
	if i := strings.LastIndex(img.Ref, ":"); i < 0 || strings.Contains(tag, "/") {
		return fmt.Errorf("image %q: Ref needs a tag (name:tag)", img.Ref)
	}
	layer, err := layerTar(img.Files)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	layerDigest := digest(layer)
	runConfig := map[string]any{"Entrypoint": img.Entrypoint, "Env": []string{"PATH=/"}}
	if img.User != "" {
		runConfig["User"] = img.User
	}
	config, err := json.Marshal(map[string]any{
		"created":      epoch,
		"architecture": "amd64",
		"os":           "linux",
		"config":       runConfig,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        descriptor{MediaType: mediaTypeConfig, Digest: digest(config), Size: int64(len(config))},
		"layers":        []descriptor{{MediaType: mediaTypeLayer, Digest: layerDigest, Size: int64(len(layer))}},
	})
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests": []descriptor{{
			MediaType: mediaTypeManifest, Digest: digest(manifest), Size: int64(len(manifest)),
			Annotations: map[string]string{annotationContainerdName: img.Ref, annotationRefName: tag},
			Platform:    &platform{Architecture: "amd64", OS: "linux"},
		}},
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layerDigest), layer},
		{blobPath(digest(config)), config},
		{blobPath(digest(manifest)), manifest},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := writeFile(tw, e.name, e.data, 0o644); err != nil {
			return err
		}
	}
	return tw.Close()
}

// WriteFile writes img as an OCI image layout tarball to the file path.
func WriteFile(path string, img Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// layerTar is an uncompressed layer holding files (image path → file on this machine), with
// the directories above them.
func layerTar(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	for _, p := range paths {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("image path %q must be absolute", p)
		}
		for d := path.Dir(p); d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		data, err := os.ReadFile(files[p])
		if err != nil {
			return nil, err
		}
		if err := writeFile(tw, strings.TrimPrefix(p, "/"), data, 0o755); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, name string, data []byte, mode int64) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }
