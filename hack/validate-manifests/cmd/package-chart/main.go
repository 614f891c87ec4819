// Command package-chart packages the slingshot Helm chart as `helm
// package` does, with Helm's own library (no helm binary needed):
// <name>-<version>.tgz in -out. `make release` runs it.
//
// It refuses a chart whose version or appVersion is not -version: the
// chart is released with the binaries and images of the same number.
//
// Usage (from hack/validate-manifests): go run ./cmd/package-chart -chart DIR -version V -out DIR
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "package-chart:", err)
			os.Exit(1)
		}
	}
}

// ErrVersion is returned for a chart whose version or appVersion is not
// the release's.
var ErrVersion = errors.New("chart version differs from the release")

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("package-chart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("chart", "../../deploy/helm/slingshot", "the chart's `directory`")
	want := fs.String("version", "", "the release: the chart's version and appVersion must both be it")
	out := fs.String("out", ".", "`directory` the package is written to (made if missing)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *want == "" {
		return fmt.Errorf("usage: package-chart -chart DIR -version V -out DIR (got %q, version %q)", fs.Args(), *want)
	}
	path, err := packageChart(*dir, *want, *out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, "chart", path)
	return err
}

// packageChart loads the chart at dir (honouring its .helmignore, as helm
// package does), checks it and its version, and writes the package into
// out, returning its path.
func packageChart(dir, version, out string) (string, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", fmt.Errorf("load chart %s: %w", dir, err)
	}
	if err := ch.Validate(); err != nil {
		return "", fmt.Errorf("chart %s: %w", dir, err)
	}
	if ch.Metadata.Version != version || ch.Metadata.AppVersion != version {
		return "", fmt.Errorf("chart %s: version %q, appVersion %q, release %q: %w", dir, ch.Metadata.Version, ch.Metadata.AppVersion, version, ErrVersion)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("package directory: %w", err)
	}
	path, err := chartutil.Save(ch, out)
	if err != nil {
		return "", fmt.Errorf("package chart %s: %w", dir, err)
	}
	return path, nil
}
