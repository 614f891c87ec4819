package dra

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// TestParseConfigServiceOptions: a claim's serviceOptions are the pod
// annotation's grammar, checked by the same parser, errors naming the
// field under serviceOptions.
func TestParseConfigServiceOptions(t *testing.T) {
	const head = `"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig"`
	for _, tt := range []struct {
		name, raw, wantErr string
		wantTCs            []string
		wantDepth          int
	}{
		{name: "classes and depth", raw: `{` + head + `,"serviceOptions":{"trafficClasses":["low_latency","BULK_DATA"],"depth":8}}`,
			wantTCs: []string{"LOW_LATENCY", "BULK_DATA"}, wantDepth: 8},
		{name: "bad class", raw: `{` + head + `,"serviceOptions":{"trafficClasses":["FAST"]}}`, wantErr: `serviceOptions: invalid service options: trafficClasses[0]: unknown class "FAST"`},
		{name: "unknown option", raw: `{` + head + `,"serviceOptions":{"dpeth":8}}`, wantErr: `unknown field "dpeth"`},
		{name: "too many VNIs", raw: `{` + head + `,"serviceOptions":{"vnis":["a","b","c","d"]}}`, wantErr: "vnis: 4 names"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tt.raw))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.ServiceOptions == nil {
				t.Fatalf("ParseConfig = %+v, %v", got, err)
			}
			if o := got.ServiceOptions; strings.Join(o.TrafficClasses, ",") != strings.Join(tt.wantTCs, ",") || o.Depth != tt.wantDepth {
				t.Fatalf("serviceOptions = %+v, want classes %v depth %d", *o, tt.wantTCs, tt.wantDepth)
			}
		})
	}
}

// TestConfigOfMergesServiceOptions: the claim's serviceOptions override
// its DeviceClass's field by field.
func TestConfigOfMergesServiceOptions(t *testing.T) {
	c := claim("c1", "train-0", `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","serviceOptions":{"depth":8}}`, "cxi0")
	cfgs := c.Status.Allocation.Devices.Config
	class := cfgs[0]
	class.Source = resourceapi.AllocationConfigSourceClass
	class.Opaque = class.Opaque.DeepCopy()
	class.Opaque.Parameters.Raw = []byte(`{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","serviceOptions":{"depth":2,"vnis":["storage"]}}`)
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{cfgs[0], class}
	got, err := configOf(c, testDriver)
	if err != nil || got.ServiceOptions == nil || got.ServiceOptions.Depth != 8 || len(got.ServiceOptions.VNIs) != 1 {
		t.Fatalf("configOf = %+v, %v; want depth 8 (the claim's) and vnis [storage] (the class's)", got.ServiceOptions, err)
	}
}
