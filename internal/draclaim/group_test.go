package draclaim

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func allocated(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "group", UID: "u-1"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results}}},
	}
}

func TestIsGroupVNI(t *testing.T) {
	vni := resourceapi.DeviceRequestAllocationResult{Request: "vni", Driver: testDriver, Pool: FabricPool, Device: VNIDevice}
	nic := resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: testDriver, Pool: "node-1", Device: "cxi0"}
	gpu := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.example.com", Pool: FabricPool, Device: VNIDevice}
	for _, tt := range []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		want    bool
		wantErr string
	}{
		{name: "unallocated", claim: &resourceapi.ResourceClaim{}},
		{name: "the fabric's vni", claim: allocated(vni), want: true},
		{name: "a nic", claim: allocated(nic)},
		{name: "another driver's device of the same names", claim: allocated(gpu)},
		{name: "vni and another driver's", claim: allocated(vni, gpu), want: true},
		{name: "vni and a nic", claim: allocated(vni, nic), want: true, wantErr: "claim of their own"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := IsGroupVNI(tt.claim, testDriver)
			if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("IsGroupVNI = %v, %v; want %v, error containing %q", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestGroupPolicyRoundTrip(t *testing.T) {
	c := allocated()
	c.Name, c.UID = "job-vni.a", "8f1c-22"
	p := GroupPolicy(c)
	name, uid, ok, err := ParseGroupPolicy(p)
	if !ok || err != nil || name != c.Name || uid != string(c.UID) {
		t.Fatalf("ParseGroupPolicy(%q) = %q, %q, %v, %v", p, name, uid, ok, err)
	}
	for _, tt := range []struct {
		v      string
		ok     bool
		errHas string
	}{
		{v: "job"},
		{v: "claim:x"},
		{v: "resourceclaim:x/u", ok: true},
		{v: "resourceclaim:x", ok: true, errHas: "NAME/UID"},
		{v: "resourceclaim:Bad_Name/u", ok: true, errHas: "object name"},
		{v: "resourceclaim:x/u/v", ok: true, errHas: "NAME/UID"},
		{v: "resourceclaim:/u", ok: true, errHas: "object name"},
	} {
		_, _, ok, err := ParseGroupPolicy(tt.v)
		if ok != tt.ok || (err == nil) != (tt.errHas == "") || (err != nil && !strings.Contains(err.Error(), tt.errHas)) {
			t.Errorf("ParseGroupPolicy(%q) = %v, %v; want %v, error containing %q", tt.v, ok, err, tt.ok, tt.errHas)
		}
	}
}

func TestInheritsGroupVNI(t *testing.T) {
	for p, want := range map[string]bool{"": true, "job": true, "pod": false, "none": false, "claim:x": false} {
		if got := InheritsGroupVNI(p); got != want {
			t.Errorf("InheritsGroupVNI(%q) = %v, want %v", p, got, want)
		}
	}
}

func FuzzParseGroupPolicy(f *testing.F) {
	for _, s := range []string{"resourceclaim:a/b", "resourceclaim:", "resourceclaim:a/", "job", "resourceclaim:a.b-c/0-1-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		name, uid, ok, err := ParseGroupPolicy(v)
		if !ok || err != nil {
			return
		}
		if got := GroupPolicyPrefix + name + "/" + uid; got != v {
			t.Fatalf("ParseGroupPolicy(%q) read %q, %q: formats back as %q", v, name, uid, got)
		}
	})
}
