// Command monitoring writes the Grafana dashboard that the chart ships
// (deploy/helm/slingshot/monitoring/dashboard.json) from package
// dashboard. The module's tests check it, and the chart's alerting rules,
// against Prometheus's PromQL parser and rule engine and against a live
// controller and a live agent in each mode (device plugin and DRA).
//
// Usage (from this directory): go run . [-root ../..]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/slingshot-k8s/slingshot/hack/monitoring/dashboard"
)

// DashboardPath is the dashboard's file, relative to the repository root.
const DashboardPath = "deploy/helm/slingshot/monitoring/dashboard.json"

// RulesPath is the alerting rules' file, relative to the repository root.
const RulesPath = "deploy/helm/slingshot/monitoring/rules.yaml"

func main() {
	root := flag.String("root", "../..", "the repository's root `directory`")
	flag.Parse()
	if err := write(*root); err != nil {
		fmt.Fprintln(os.Stderr, "monitoring:", err)
		os.Exit(1)
	}
}

func write(root string) error {
	b, err := dashboard.JSON()
	if err != nil {
		return err
	}
	path := filepath.Join(root, DashboardPath)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write dashboard: %w", err)
	}
	fmt.Println("wrote", path)
	return nil
}
