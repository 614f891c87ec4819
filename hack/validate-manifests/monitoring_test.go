package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// The chart ships the rule file and the dashboard as they are (their
// checks live in hack/monitoring): the PrometheusRule's groups are the
// file's, Prometheus's templates in the annotations untouched by Helm,
// with prometheusRule.additionalLabels on every alert beside, never over,
// the rule's own; the ConfigMap holds the dashboard byte for byte.
func TestMonitoringRender(t *testing.T) {
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := VariantNamed("all-features")
	rendered, err := Render(ch, all.Values)
	if err != nil {
		t.Fatal(err)
	}
	ruleFile, err := os.ReadFile(filepath.Join("../..", chartDir, "monitoring/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := yaml.Unmarshal(ruleFile, &want); err != nil {
		t.Fatal(err)
	}
	dashboard, err := os.ReadFile(filepath.Join("../..", chartDir, "monitoring/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rules, dashboards int
	for _, m := range rendered {
		o, err := Decode([]byte(m.Content))
		if err != nil || o == nil {
			continue
		}
		switch {
		case o.GVK.Kind == "PrometheusRule":
			rules++
			var pr struct {
				Spec struct {
					Groups []ruleGroup `json:"groups"`
				} `json:"spec"`
			}
			if err := json.Unmarshal(o.JSON, &pr); err != nil {
				t.Fatal(err)
			}
			if len(pr.Spec.Groups) != len(want.Groups) {
				t.Fatalf("%d rule groups, the file has %d", len(pr.Spec.Groups), len(want.Groups))
			}
			for i, g := range pr.Spec.Groups {
				if len(g.Rules) != len(want.Groups[i].Rules) {
					t.Fatalf("group %s: %d rules, the file has %d", g.Name, len(g.Rules), len(want.Groups[i].Rules))
				}
				for j, r := range g.Rules {
					w := want.Groups[i].Rules[j]
					if r.Expr != w.Expr || r.Annotations["description"] != w.Annotations["description"] || r.Annotations["summary"] != w.Annotations["summary"] {
						t.Errorf("%s: rendered %+v, the file's %+v", w.Alert, r, w)
					}
					if r.Labels["route"] != "hpc-oncall" || r.Labels["severity"] != w.Labels["severity"] {
						t.Errorf("%s: labels %v; want route=hpc-oncall from additionalLabels and the rule's severity %q", w.Alert, r.Labels, w.Labels["severity"])
					}
				}
			}
		case o.GVK.Kind == "ConfigMap" && o.Name == "slingshot-dashboard":
			dashboards++
			var cm struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Data map[string]string `json:"data"`
			}
			if err := json.Unmarshal(o.JSON, &cm); err != nil {
				t.Fatal(err)
			}
			if cm.Metadata.Labels["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap labels %v: no grafana_dashboard label for the sidecar", cm.Metadata.Labels)
			}
			if cm.Data["slingshot.json"]+"\n" != string(dashboard) {
				t.Error("the ConfigMap's slingshot.json differs from monitoring/dashboard.json")
			}
		}
	}
	if rules != 1 || dashboards != 1 {
		t.Fatalf("%d PrometheusRules and %d dashboard ConfigMaps, want one each", rules, dashboards)
	}
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Alert       string            `json:"alert"`
		Expr        string            `json:"expr"`
		For         string            `json:"for"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"rules"`
}
