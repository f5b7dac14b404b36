// Command version prints the version that a build of this tree gets (pkg/version): the
// Makefile tags the images and names the release's manifests with it, so that they say what
// the binaries built from the same tree say.
package main

import (
	"fmt"

	"github.com/faultline-dev/faultline/pkg/version"
)

func main() { fmt.Println(version.Version) }
