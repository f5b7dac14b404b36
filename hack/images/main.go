// Command images assembles faultline's three images (pkg/image) from the binaries `make
// images` built, one directory per platform (<bin-dir>/linux_amd64, <bin-dir>/linux_arm64),
// into OCI image layouts under --out (one per image, its multi-platform index tagged with the
// version), and prints each image's reference and digest. With --push REGISTRY it also pushes
// them there (`make release`).
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/faultline-dev/faultline/pkg/image"
	"github.com/faultline-dev/faultline/pkg/version"
)

// release is a release's version; anything else (a git describe) is not the latest.
var release = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		ver       = flag.String("version", version.Version, "the release's version (the images' tag)")
		revision  = flag.String("revision", "", "the commit, for the images' labels")
		binDir    = flag.String("bin-dir", "_output/images/bin", "the binaries, in one directory per platform (linux_amd64, ...)")
		platforms = flag.String("platforms", "linux/amd64,linux/arm64", "the platforms, comma-separated")
		out       = flag.String("out", "_output/images", "where the OCI image layouts go (<out>/<image name>)")
		registry  = flag.String("registry", version.DefaultRegistry, "the registry the layouts' references name")
		caBundle  = flag.String("ca-bundle", image.DefaultCABundle, "the CA bundle the images hold")
		push      = flag.Bool("push", false, "also push the images to --registry (credentials: ~/.docker/config.json)")
		insecure  = flag.Bool("insecure", false, "with --push: the registry serves plain HTTP")
	)
	flag.Parse()
	var inputs []image.PlatformInputs
	for _, p := range strings.Split(*platforms, ",") {
		plat, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		glibc, err := image.GlibcDir(plat.Architecture)
		if err != nil {
			return err
		}
		inputs = append(inputs, image.PlatformInputs{Platform: *plat, Inputs: image.Inputs{
			Version: *ver, Revision: *revision, CABundle: *caBundle, Glibc: glibc,
			BinDir: filepath.Join(*binDir, plat.OS+"_"+plat.Architecture),
		}})
	}
	indexes, err := image.BuildRelease(inputs)
	if err != nil {
		return err
	}
	for _, n := range slices.Sorted(maps.Keys(indexes)) {
		ref := image.Ref(*registry, n, *ver)
		if err := image.WriteLayout(filepath.Join(*out, n), ref, indexes[n]); err != nil {
			return err
		}
		digest, err := image.Digest(indexes[n])
		if err != nil {
			return err
		}
		if *push {
			refs := []string{ref}
			// A release is also the latest: deploy/'s manifests name it (kubectl apply -k).
			if release.MatchString(*ver) {
				refs = append(refs, image.Ref(*registry, n, "latest"))
			}
			for _, r := range refs {
				if err := image.Push(context.Background(), r, indexes[n], *insecure); err != nil {
					return err
				}
				fmt.Printf("%s@%s pushed\n", r, digest)
			}
			continue
		}
		fmt.Printf("%s@%s in %s\n", ref, digest, filepath.Join(*out, n))
	}
	return nil
}
