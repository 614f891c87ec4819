package simstate

import (
	"slices"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// TestReadMatchesDriver: a service made through the simulated driver
// reads back with its ID, state, VNIs and only member.
func TestReadMatchesDriver(t *testing.T) {
	dir := t.TempDir()
	s, err := sim.Open(dir, "cxi0", sim.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := uapi.NewDevice(s)
	desc := uapi.SvcDesc{RestrictedVNIs: true, RestrictedMembers: true, NumVldVNIs: 1}
	desc.VNIs[0] = 1024
	id, _, err := d.AllocService(desc)
	if err != nil {
		t.Fatal(err)
	}
	// As the agent binds a pod: disabled, the namespace added, enabled.
	if err := d.EnableService(id, false); err != nil {
		t.Fatal(err)
	}
	svc, ok, err := Find(dir, "cxi0", id)
	if err != nil || !ok {
		t.Fatalf("service %d: found %v, %v", id, ok, err)
	}
	if svc.Enabled || len(svc.NetNS) != 0 {
		t.Errorf("before the bind: %+v, want disabled without member", svc)
	}
	if err := d.SetNetns(id, 4026532000); err != nil {
		t.Fatal(err)
	}
	if err := d.EnableService(id, true); err != nil {
		t.Fatal(err)
	}
	svc, ok, err = Find(dir, "cxi0", id)
	if err != nil || !ok {
		t.Fatalf("service %d: found %v, %v", id, ok, err)
	}
	if !svc.Enabled || !svc.OnlyNetns(4026532000) || !slices.Equal(svc.VNIs, []uint16{1024}) || svc.ID != id {
		t.Errorf("after the bind: %+v, want service %d enabled, only netns 4026532000, VNI 1024", svc, id)
	}
	all, err := Read(dir, "cxi0")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 || all[0].ID != 1 || !slices.Equal(all[0].VNIs, []uint16{1, 10}) || all[0].Enabled {
		t.Errorf("services %+v: want the disabled default service 1 (VNIs 1, 10) first", all)
	}
	if err := d.DestroyService(id); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Find(dir, "cxi0", id); ok || err != nil {
		t.Errorf("service %d after destroy: found %v, %v", id, ok, err)
	}
}
