package draclaim

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestParseConfig(t *testing.T) {
	const head = `"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig"`
	for _, tt := range []struct {
		name, raw, wantErr string
		want               ClaimConfig
	}{
		{name: "empty", raw: `{` + head + `}`, want: ClaimConfig{APIVersion: ConfigAPIVersion, Kind: ConfigKind}},
		{name: "job", raw: `{` + head + `,"vni":"job"}`, want: ClaimConfig{APIVersion: ConfigAPIVersion, Kind: ConfigKind, VNI: "job"}},
		{name: "claim and suffix", raw: `{` + head + `,"vni":"claim:storage-a","envSuffix":"STORAGE_1"}`,
			want: ClaimConfig{APIVersion: ConfigAPIVersion, Kind: ConfigKind, VNI: "claim:storage-a", EnvSuffix: "STORAGE_1"}},
		{name: "wrong kind", raw: `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"Other"}`, wantErr: "want slingshot.hpe.com/v1alpha1"},
		{name: "unknown field", raw: `{` + head + `,"vnis":"job"}`, wantErr: "unknown field"},
		{name: "bad vni", raw: `{` + head + `,"vni":"everyone"}`, wantErr: "want job, pod, none or claim:NAME"},
		{name: "bad claim name", raw: `{` + head + `,"vni":"claim:Bad_Name"}`, wantErr: "claim:NAME"},
		{name: "bad suffix", raw: `{` + head + `,"envSuffix":"lower"}`, wantErr: "envSuffix"},
		{name: "trailing", raw: `{` + head + `}{}`, wantErr: "trailing"},
		{name: "not json", raw: `vni: job`, wantErr: "CXIClaimConfig"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tt.raw))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestConfigOfOverridesClassWithClaim: the claim's entry wins over its
// DeviceClass's, field by field; other drivers' entries are ignored.
func TestConfigOfOverridesClassWithClaim(t *testing.T) {
	c := configuredClaim(`{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","vni":"pod"}`)
	cfgs := c.Status.Allocation.Devices.Config
	class := cfgs[0]
	class.Source = resourceapi.AllocationConfigSourceClass
	class.Opaque = class.Opaque.DeepCopy()
	class.Opaque.Parameters.Raw = []byte(`{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","vni":"none","envSuffix":"X"}`)
	other := cfgs[0]
	other.Opaque = other.Opaque.DeepCopy()
	other.Opaque.Driver = "gpu.example.com"
	other.Opaque.Parameters.Raw = []byte(`not ours`)
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{cfgs[0], class, other}
	got, err := ConfigOf(c, testDriver)
	if err != nil || got.VNI != "pod" || got.EnvSuffix != "X" {
		t.Fatalf("ConfigOf = %+v, %v; want vni pod (the claim's) and envSuffix X (the class's)", got, err)
	}
}

const testDriver = "cxi.slingshot.hpe.com"

// configuredClaim is an allocated claim whose own entry for testDriver
// is raw.
func configuredClaim(raw string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
		Source: resourceapi.AllocationConfigSourceClaim,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: testDriver, Parameters: runtime.RawExtension{Raw: []byte(raw)},
		}},
	}}
	return c
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","vni":"claim:a","envSuffix":"B"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := ParseConfig(raw)
		if err != nil {
			return
		}
		if checkVNI(c.VNI) != nil || c.EnvSuffix != "" && !envSuffix.MatchString(c.EnvSuffix) {
			t.Fatalf("accepted %q as %+v", raw, c)
		}
	})
}
