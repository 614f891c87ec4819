package agent

import (
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
)

func TestPolicyFrom(t *testing.T) {
	c, err := config.Parse([]byte("trafficClasses: [BULK_DATA, DEDICATED_ACCESS]\nlimits: {TXQs: {max: 64, res: 2}, TLEs: {max: 0, res: 0}}\nmembership: {fallbackUID: 1000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := policyFrom(c)
	if p.tcs != cxi.TCBulkData|cxi.TCDedicatedAccess {
		t.Errorf("tcs = %v", p.tcs)
	}
	if p.limits == nil || p.limits.TXQs != (cxi.Limit{Max: 64, Res: 2}) || p.limits.EQs != cxi.DefaultLimits().EQs {
		t.Errorf("limits = %+v", p.limits)
	}
	if p.fallback == nil || *p.fallback != (cxi.Member{Type: cxi.MemberUID, ID: 1000}) {
		t.Errorf("fallback = %v", p.fallback)
	}
	if d := policyFrom(config.Default()); d.limits != nil || d.fallback != nil || d.tcs != cxi.DefaultTrafficClasses {
		t.Errorf("default policy = %+v", d)
	}
}

func TestInventory(t *testing.T) {
	nics := []sysfs.NIC{
		{Name: "cxi0", Path: "class/cxi/cxi0", PCIAddress: "0000:21:00.0", NUMANode: 0, Healthy: true, NetDev: &sysfs.NetDev{Name: "hsn1"}},
		{Name: "cxi1", Path: "class/cxi/cxi1", PCIAddress: "0000:41:00.0", NUMANode: -1, Healthy: false},
	}
	inv := newInventory(nics, 2)
	devs := inv.devices()
	if len(devs) != 4 || devs[0].ID != "0000:21:00.0-s0" || !devs[0].Healthy || devs[2].Healthy || devs[2].NUMANodes != nil {
		t.Fatalf("devices = %+v", devs)
	}
	if inv.setHealth("cxi0", true, "") {
		t.Error("unchanged health reported as a change")
	}
	if !inv.setHealth("cxi1", true, "") || !inv.devices()[2].Healthy {
		t.Error("health change not applied")
	}
	if inv.setHealth("cxi9", false, "x") {
		t.Error("unknown NIC reported as a change")
	}
	ts := inv.healthTargets("/sys")
	if ts[0].DeviceDir != "/sys/class/cxi/cxi0/device" || ts[0].NetDir != "/sys/class/net/hsn1" || ts[1].NetDev != "" {
		t.Fatalf("targets = %+v", ts)
	}
	if one := newInventory(nics[:1], 1).devices(); one[0].ID != "0000:21:00.0" {
		t.Fatalf("single-share ID = %q, want the PCI address", one[0].ID)
	}
}
