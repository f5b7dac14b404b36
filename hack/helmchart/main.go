// Command helmchart writes faultline's Helm chart (pkg/helmchart): `make generate` into
// deploy/helm/faultline, as a tree with no release has it; `make release` with --version and
// --package, as that release's chart archive (faultline-<version>.tgz).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"

	"github.com/faultline-dev/faultline/pkg/helmchart"
	"github.com/faultline-dev/faultline/pkg/version"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "helmchart:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		ver      = flag.String("version", "", "faultline's version (empty: a tree with no release)")
		registry = flag.String("registry", "", "the images' registry, the chart's default (empty: "+version.DefaultRegistry+")")
		out      = flag.String("out", helmchart.Dir, "where the chart's directory goes")
		pkg      = flag.String("package", "", "also package the chart, as Helm does, into this directory")
	)
	flag.Parse()
	files, err := helmchart.Files(*ver, *registry)
	if err != nil {
		return err
	}
	// The templates are rewritten whole: one a component no longer has goes.
	if err := os.RemoveAll(filepath.Join(*out, "templates")); err != nil {
		return err
	}
	for name, b := range files {
		p := filepath.Join(*out, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	if *out != helmchart.Dir {
		// The chart's README is written by hand, beside what is generated.
		readme, err := os.ReadFile(filepath.Join(helmchart.Dir, "README.md"))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*out, "README.md"), readme, 0o644); err != nil {
			return err
		}
	}
	if *pkg == "" {
		return nil
	}
	chart, err := loader.LoadDir(*out)
	if err != nil {
		return fmt.Errorf("load the chart %s: %w", *out, err)
	}
	if err := os.MkdirAll(*pkg, 0o755); err != nil {
		return err
	}
	archive, err := chartutil.Save(chart, *pkg)
	if err != nil {
		return err
	}
	fmt.Println(archive)
	return nil
}
