package cli

import (
	"fmt"
	"io"

	"github.com/faultline-dev/faultline/pkg/version"
)

// PrintVersion writes the launcher's version, its license and the images `launcher install`
// of this version installs (under registry, "" for the default); short writes the version
// alone.
func PrintVersion(w io.Writer, registry string, short bool) error {
	if short {
		_, err := fmt.Fprintln(w, version.Version)
		return err
	}
	im := InstallOptions{Registry: registry}.Images()
	_, err := fmt.Fprintf(w, "launcher %s (%s)\ninstalls:\n  controller  %s\n  node agent  %s\n  barrier     %s\n",
		version.Version, version.License, im.Controller, im.Agent, im.Barrier)
	return err
}
