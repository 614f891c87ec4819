package config

import (
	"errors"
	"strings"
	"testing"
)

func TestJobOptionsValidation(t *testing.T) {
	tests := []struct {
		name, yaml, wantErr string
	}{
		{name: "defaults", yaml: ``},
		{name: "a full policy", yaml: `
jobOptions:
  trafficClasses: {everyone: [BEST_EFFORT], namespaces: {hpc: [BULK_DATA]}}
  maxDepth: 128
  adjustLimits: false
  resources: {TLEs: {def: 1, max: 64}}
  extraVNIs: [{name: storage, vni: 900, namespaces: [hpc]}]`},
		{name: "unknown class", yaml: `{jobOptions: {trafficClasses: {everyone: [FAST]}}}`, wantErr: `jobOptions.trafficClasses.everyone: unknown class "FAST"`},
		{name: "bad namespace", yaml: `{jobOptions: {trafficClasses: {namespaces: {HPC: [BULK_DATA]}}}}`, wantErr: `"HPC" is not a namespace name`},
		{name: "depth 0", yaml: `{jobOptions: {maxDepth: 0}}`, wantErr: "jobOptions.maxDepth: 0 is outside"},
		{name: "unknown resource", yaml: `{jobOptions: {resources: {QPs: {def: 1, max: 2}}}}`, wantErr: `unknown resource "QPs"`},
		{name: "def with max 0", yaml: `{jobOptions: {resources: {LEs: {def: 1, max: 0}}}}`, wantErr: "jobOptions.resources.LEs: def 1 with max 0"},
		{name: "VNI 0", yaml: `{jobOptions: {extraVNIs: [{name: s, vni: 0}]}}`, wantErr: "extraVNIs[0].vni: 0 is not a VNI"},
		{name: "default service VNI", yaml: `{jobOptions: {extraVNIs: [{name: s, vni: 10}]}}`, wantErr: "extraVNIs[0].vni: 10 is the driver's default service's"},
		{name: "name twice", yaml: `{jobOptions: {extraVNIs: [{name: s, vni: 900}, {name: s, vni: 901}]}}`, wantErr: `extraVNIs[1].name: "s" is defined twice`},
		{name: "VNI twice", yaml: `{jobOptions: {extraVNIs: [{name: s, vni: 900}, {name: t, vni: 900}]}}`, wantErr: `extraVNIs[1].vni: 900 is also "s"'s`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Parse = %v, want an ErrInvalid containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckNamedVNIs(t *testing.T) {
	c, err := Parse([]byte(`{jobOptions: {extraVNIs: [{name: storage, vni: 900}, {name: inside, vni: 2000}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckNamedVNIs(1024, 65535); !errors.Is(err, ErrNamedVNIManaged) || !strings.Contains(err.Error(), "extraVNIs[1] (inside) is VNI 2000, inside 1024-65535") {
		t.Fatalf("CheckNamedVNIs = %v", err)
	}
	if err := c.CheckNamedVNIs(3000, 4000); err != nil {
		t.Fatalf("CheckNamedVNIs outside the range: %v", err)
	}
}
