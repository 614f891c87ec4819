package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/slingshot-k8s/slingshot/hack/monitoring/dashboard"
)

// The chart's dashboard is the one package dashboard builds: edit the Go,
// then `go run .` here (or `make manifests`).
func TestDashboardIsGenerated(t *testing.T) {
	want, err := dashboard.JSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, DashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from package dashboard's build: run `make manifests` (or `go run .` in hack/monitoring)", DashboardPath)
	}
}

// Every panel query and variable of the dashboard parses with Prometheus's
// PromQL parser once Grafana's variables are given values.
func TestDashboardQueriesParse(t *testing.T) {
	qs, err := DashboardQueries(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 20 {
		t.Fatalf("%d dashboard queries; the file lost its panels?", len(qs))
	}
	for _, q := range qs {
		if _, _, err := Uses(q.Expr); err != nil {
			t.Errorf("%s: %q: %v", q.Where, q.Expr, err)
		}
	}
}

// A query that is not PromQL, or names a variable the check does not
// know, is reported, not skipped.
func TestQueryChecksRefuseBadInput(t *testing.T) {
	for _, tt := range []struct{ name, expr string }{
		{"unbalanced", `sum(rate(x[5m])`},
		{"unknown function", `frobnicate(x)`},
		{"range where a vector is needed", `sum(x[5m])`},
	} {
		if _, _, err := Uses(tt.expr); err == nil {
			t.Errorf("%s: %q parsed", tt.name, tt.expr)
		}
	}
	if _, err := expandVariables(`x{node=~"$cluster"}`); err == nil {
		t.Error("an unknown Grafana variable was accepted")
	}
}
