package agent

import (
	"errors"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// Issue 24, defect 5, on the device-plugin front end: a checkpoint change
// the store refused was logged and the bind carried on, so PreStart could
// succeed with a service missing from the record. It now fails the bind
// and leaves no unrecorded service behind.
func TestDefect5RefusedRecordFailsPreStart(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, netAB)
	k := newFakeKubelet(t)
	r.useWatcher(k, nil)
	// Learn the ID the driver hands out next on cxi0 (its lowest free),
	// and record it for another pod, as a corrupt or stale record would.
	drv := r.b.nics["cxi0"].drv
	probe, err := drv.Create(t.Context(), cxi.ServiceSpec{VNIs: []uint16{3000}, Members: []cxi.Member{{Type: cxi.MemberUID, ID: 1}}, TCs: cxi.DefaultTrafficClasses})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Destroy(t.Context(), probe.ID); err != nil {
		t.Fatal(err)
	}
	other := checkpoint.Pod{Namespace: "ns", Name: "other", Services: []checkpoint.Service{{NIC: "cxi0", ID: probe.ID}}, DeviceIDs: map[string][]string{}}
	if err := r.b.store.Put(other); err != nil {
		t.Fatal(err)
	}

	k.admit(kpodA)
	err = r.b.PreStart(t.Context(), res, kpodA.ids)
	if !errors.Is(err, checkpoint.ErrInvariant) {
		t.Fatalf("PreStart whose record was refused: %v, want the store's refusal", err)
	}
	for _, s := range r.services(t, "cxi0") {
		if s.ID == probe.ID || slicesContainsMember(s, netAB["uid-a"]) {
			t.Fatalf("service %d admitting %v left on the driver after the refused bind", s.ID, s.Members)
		}
	}
	if r.has("ns/a") {
		t.Fatal("the refused bind left pod a's record")
	}
}

func slicesContainsMember(s cxi.Service, inode uint32) bool {
	for _, m := range s.Members {
		if m.Type == cxi.MemberNetNS && m.ID == inode {
			return true
		}
	}
	return false
}
