// Package versiontest reads the chart's appVersion for tests, which check
// that what the binaries say agrees with it.
package versiontest

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// ChartPath is the chart's directory under the repository's root.
const ChartPath = "deploy/helm/slingshot"

// Chart is what of Chart.yaml the version checks read.
type Chart struct {
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

// ReadChart reads Chart.yaml of the repository at root (a relative path
// from the test's package directory, such as "../..").
func ReadChart(tb testing.TB, root string) Chart {
	tb.Helper()
	p := filepath.Join(root, ChartPath, "Chart.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		tb.Fatal(err)
	}
	var c Chart
	if err := yaml.Unmarshal(b, &c); err != nil {
		tb.Fatalf("%s: %v", p, err)
	}
	if c.AppVersion == "" {
		tb.Fatalf("%s: no appVersion", p)
	}
	return c
}
