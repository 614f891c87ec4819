package devplugin

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
)

// Issue 24, defect 5, on the device-plugin front end: a checkpoint change
// the store refused was logged and the bind carried on, so PreStart could
// succeed with part of its work missing from the record. Here the refused
// change is the pod's hsn address, which a stale record already names: the
// bind now fails and leaves neither the address nor the pod recorded.
func TestDefect5RefusedRecordFailsPreStart(t *testing.T) {
	h := newHSNRig(t, fakeNetns{"uid-p": 4026532001, "uid-a": 4026532002})
	// A probe pod shows the address the allocator hands out next (it is
	// next-fit: the one after the probe's).
	h.pods.set(pod("ns", "probe", "uid-p", "main", dev0))
	if err := h.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	probe, _ := h.store.Get("ns/probe")
	next := probe.HSN.Address.Addr().Next()
	stale := checkpoint.Holder{Kind: checkpoint.KindPod, Namespace: "ns", Name: "stale", DeviceIDs: map[string][]string{},
		HSN: &checkpoint.HSNLink{Name: "hsn0", Parent: "hsn0", Mode: "macvlan", Address: netip.PrefixFrom(next, probe.HSN.Address.Bits()), Owner: "pod/gone/hsn0"}}
	if err := h.store.Put(stale); err != nil {
		t.Fatal(err)
	}

	h.pods.set(pod("ns", "a", "uid-a", "main", dev1))
	err := h.b.PreStart(t.Context(), res, []string{dev1})
	if !errors.Is(err, checkpoint.ErrInvariant) {
		t.Fatalf("PreStart whose hsn address the record refused: %v, want the store's refusal", err)
	}
	if h.has("ns/a") {
		t.Fatal("the refused bind left pod a's record")
	}
	if _, attached := h.linker.In(4026532002, "hsn0"); attached {
		t.Fatal("the refused bind left an hsn interface in pod a")
	}
}
