package main

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/slingshot-k8s/slingshot/internal/version"
	"github.com/slingshot-k8s/slingshot/internal/version/versiontest"
)

const chartDir = "../../../../" + versiontest.ChartPath

func TestPackageChart(t *testing.T) {
	release := versiontest.ReadChart(t, "../../../..").AppVersion
	if release != version.Version {
		t.Fatalf("the chart's appVersion %q is not the binaries' %q", release, version.Version)
	}
	tests := []struct {
		name    string
		dir     string
		version string
		fails   bool
		wantIs  error // what the failure wraps, where it is known
	}{
		{name: "the release", dir: chartDir, version: release},
		{name: "another release", dir: chartDir, version: "9.9.9", fails: true, wantIs: ErrVersion},
		{name: "no chart", dir: t.TempDir(), version: release, fails: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "dist")
			path, err := packageChart(tt.dir, tt.version, out)
			if tt.fails {
				if err == nil || (tt.wantIs != nil && !errors.Is(err, tt.wantIs)) {
					t.Fatalf("packageChart = %q, %v; want an error wrapping %v", path, err, tt.wantIs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(out, "slingshot-"+release+".tgz"); path != want {
				t.Errorf("packaged to %s, want %s", path, want)
			}
			// The package loads as the chart it came from.
			got, err := loader.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			src, err := loader.LoadDir(tt.dir)
			if err != nil {
				t.Fatal(err)
			}
			if got.Metadata.AppVersion != release || len(got.Templates) != len(src.Templates) || len(got.CRDObjects()) != len(src.CRDObjects()) {
				t.Errorf("package: appVersion %q, %d templates, %d CRDs; the chart: %d templates, %d CRDs",
					got.Metadata.AppVersion, len(got.Templates), len(got.CRDObjects()), len(src.Templates), len(src.CRDObjects()))
			}
		})
	}
}

func TestRunNeedsAVersion(t *testing.T) {
	err := run([]string{"-chart", chartDir, "-out", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "usage") {
		t.Fatalf("run without -version: %v, want a usage error", err)
	}
}
