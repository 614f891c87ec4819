package devplugin

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// rangeService makes, as another tool would (cxi_service with a vni_min
// and vni_max, a workload manager), a service on a simulated NIC that
// holds the VNI range lo-hi for uid 2000. It returns its ID.
func (r *rig) rangeService(t *testing.T, nicName string, lo, hi uint32) uint32 {
	t.Helper()
	dev := uapi.NewDevice(r.sims[nicName])
	d := uapi.SvcDesc{RestrictedMembers: true, ResourceLimits: true}
	d.Members[0] = uapi.SvcMember{Type: uapi.MemberUID, ID: 2000}
	id, _, err := dev.AllocService(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.SetVNIRange(id, lo, hi); err != nil {
		t.Fatal(err)
	}
	if err := dev.EnableService(id, true); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestItem13ForeignRangeConflictIsNamedAndCounted: the driver refuses
// (EEXIST) a service whose VNI lies in another service's VNI range. The
// agent's own services never do that to each other (they list exact VNIs,
// which services may share), but a range another tool set on the NIC
// does. The pod's bind then fails with an error that names the service in
// the way, counted apart from other create failures, and leaves nothing.
func TestItem13ForeignRangeConflictIsNamedAndCounted(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001, "uid-b": 4026532002})
	foreign := r.rangeService(t, "cxi0", 1024, 2047) // the leaser's first VNI is 1024
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0), pod("ns", "b", "uid-b", "main", dev1))

	err := r.b.PreStart(t.Context(), res, []string{dev0})
	want := fmt.Sprintf("service %d (VNI range 1024-2047, members uid=2000)", foreign)
	if !errors.Is(err, cxi.ErrExists) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "cxi0") {
		t.Fatalf("PreStart = %v, want ErrExists naming %s on cxi0", err, want)
	}
	errs := r.em.ServiceErrors
	if c, o := testutil.ToFloat64(errs.WithLabelValues("cxi0", "create_conflict")), testutil.ToFloat64(errs.WithLabelValues("cxi0", "create")); c != 1 || o != 0 {
		t.Fatalf("service errors on cxi0: create_conflict %v, create %v; want 1 and 0", c, o)
	}
	if svcs := r.services(t, "cxi0"); len(svcs) != 1 || svcs[0].ID != foreign || *svcs[0].VNIRange != (cxi.VNIRange{Min: 1024, Max: 2047}) {
		t.Fatalf("cxi0 services = %+v, want only the foreign range service", svcs)
	}
	if r.has("ns/a") || r.leaser.held["ns/a"] != 0 {
		t.Fatal("the refused bind kept its record or its lease")
	}
	// The range is on cxi0 only: a pod on cxi1 binds.
	if err := r.b.PreStart(t.Context(), res, []string{dev1}); err != nil {
		t.Fatalf("PreStart on the NIC without the range: %v", err)
	}
}

// TestItem13SystemServicesAreNeverTouched: a booted node has cxi_eth's
// Ethernet service (a system service, ID 2, holding an LNI) on every NIC,
// and may have other system services. Binds, cleanups and a start-up
// reconcile that cleans the whole VNI range leave them as they were.
func TestItem13SystemServicesAreNeverTouched(t *testing.T) {
	dir := t.TempDir()
	netns := fakeNetns{"uid-a": 4026532001}
	r := newRig(t, dir, nil, netns)
	sysDesc := uapi.SvcDesc{RestrictedMembers: true, RestrictedVNIs: true, IsSystemSvc: true, NumVldVNIs: 1}
	sysDesc.VNIs[0] = 3000
	sysDesc.Members[0] = uapi.SvcMember{Type: uapi.MemberUID, ID: 0}
	sysID, _, err := uapi.NewDevice(r.sims["cxi1"]).AllocService(sysDesc)
	if err != nil {
		t.Fatal(err)
	}
	system := func(rr *rig, nicName string) []cxi.Service {
		all, err := rr.drvs[nicName].List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(all, func(s cxi.Service) bool { return !s.System })
	}
	before := map[string][]cxi.Service{"cxi0": system(r, "cxi0"), "cxi1": system(r, "cxi1")}
	if len(before["cxi0"]) != 1 || before["cxi0"][0].ID != 2 || !before["cxi0"][0].Enabled || len(before["cxi1"]) != 2 {
		t.Fatalf("system services = %+v, want the Ethernet service (2) on each NIC and service %d on cxi1", before, sysID)
	}

	r.pods.set(pod("ns", "a", "uid-a", "main", dev0, dev1))
	if err := r.b.PreStart(t.Context(), res, []string{dev0, dev1}); err != nil {
		t.Fatal(err)
	}
	for _, svc := range r.record(t, "ns/a").Services {
		if svc.ID == 2 || svc.NIC == "cxi1" && svc.ID == sysID {
			t.Fatalf("the pod's service %+v has a system service's ID", svc)
		}
	}
	// The agent restarts and cleans every non-system service of the whole
	// range it does not own; then the pod exits.
	r2 := newRig(t, dir, r.leaser, netns)
	r2.pods.set(pod("ns", "a", "uid-a", "main", dev0, dev1))
	rep, err := r2.b.Reconcile(t.Context(), ReconcileOptions{CleanManaged: true, ManagedLo: 1, ManagedHi: 65535})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Destroyed != 0 || rep.Kept != 2 {
		t.Fatalf("reconcile = %+v, want both pod services kept and nothing destroyed", rep)
	}
	r2.pods.set()
	var wg sync.WaitGroup
	r2.b.sweep(t.Context(), &wg)
	wg.Wait()
	for _, n := range []string{"cxi0", "cxi1"} {
		if svcs := r2.services(t, n); len(svcs) != 0 {
			t.Fatalf("%s: services left after the pod exited: %+v", n, svcs)
		}
		if after := system(r2, n); !reflect.DeepEqual(after, before[n]) {
			t.Fatalf("%s system services %+v, were %+v", n, after, before[n])
		}
	}
}
