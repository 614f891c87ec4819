package devplugin

import (
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/hsnlink"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
)

func TestPolicyFrom(t *testing.T) {
	c, err := config.Parse([]byte("membership: {fallbackUID: 1000}\nnicResource: {hsnInterface: {enabled: true, mode: ipvlan, pool: hsn0}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := policyFrom(c)
	if p.fallback == nil || *p.fallback != (cxi.Member{Type: cxi.MemberUID, ID: 1000}) {
		t.Errorf("fallback = %v", p.fallback)
	}
	if h, ok := p.hsn[c.NICResource.Name]; !ok || h.Mode != hsnlink.IPVLAN || h.Pool != "hsn0" {
		t.Errorf("hsn = %+v", p.hsn)
	}
	if d := policyFrom(config.Default()); d.fallback != nil || d.hsn != nil {
		t.Errorf("default policy = %+v", d)
	}
}

// TestDevices: each NIC share is a device, named by the NIC's PCI address
// (the address alone with one share), healthy as its NIC, on its NUMA
// node; a GPU unit's NICs are not offered.
func TestDevices(t *testing.T) {
	nics := []sysfs.NIC{
		{Name: "cxi0", PCIAddress: "0000:21:00.0", NUMANode: 0},
		{Name: "cxi1", PCIAddress: "0000:41:00.0", NUMANode: -1},
	}
	healthy := map[string]bool{"cxi0": true}
	f := &Front{nics: nics, shares: 2, healthy: func(n string) bool { return healthy[n] }}
	devs := f.devices()
	if len(devs) != 4 || devs[0].ID != "0000:21:00.0-s0" || !devs[0].Healthy || devs[2].Healthy || devs[2].NUMANodes != nil {
		t.Fatalf("devices = %+v", devs)
	}
	healthy["cxi1"] = true
	if !f.devices()[2].Healthy {
		t.Error("health change not applied")
	}
	f.unitNICs = map[string]bool{"cxi0": true}
	if devs := f.devices(); len(devs) != 2 || devs[0].ID != "0000:41:00.0-s0" {
		t.Fatalf("devices with cxi0 in a unit = %+v", devs)
	}
	one := &Front{nics: nics[:1], shares: 1, healthy: func(string) bool { return true }}
	if d := one.devices(); d[0].ID != "0000:21:00.0" {
		t.Fatalf("single-share ID = %q, want the PCI address", d[0].ID)
	}
}
