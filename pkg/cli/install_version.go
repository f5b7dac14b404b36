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
	_, err := fmt.Fprintf(w, "launcher %s (%s)\n%sinstalls:\n  controller  %s\n  node agent  %s\n  barrier     %s\n",
		version.Version, version.License, devNote(), im.Controller, im.Agent, im.Barrier)
	return err
}

// devNote says why a build has no version, and what it installs: nothing for a release.
func devNote() string {
	if version.Version != version.Dev {
		return ""
	}
	from := "a tree without version control information (-buildvcs=false, or no .git)"
	if version.Revision != "" {
		from = "commit " + version.Revision
		if version.Modified {
			from += " with changes not committed"
		}
		from += ", which no release tag precedes"
	}
	return "  built from " + from + ": it installs the images `make images` builds from the same tree (tagged dev)\n"
}
