package devplugin

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// failingList is a driver whose List fails.
type failingList struct{ engine.Driver }

func (failingList) List(context.Context) ([]cxi.Service, error) {
	return nil, errors.New("device gone")
}

func TestInUseVNIs(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001})
	ctx := t.Context()
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	if err := r.b.PreStart(ctx, res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	// A lease recorded before its services exist (a bind under way).
	if err := r.store.Put(checkpoint.Holder{Kind: checkpoint.KindPod, UID: "uid-b", Namespace: "ns", Name: "b", VNI: 1999, LeaseKey: "job/ns/b"}); err != nil {
		t.Fatal(err)
	}
	// A service the agent did not make.
	if _, err := r.drvs["cxi1"].Create(ctx, cxi.ServiceSpec{VNIs: []uint16{3000}, Members: []cxi.Member{{Type: cxi.MemberUID, ID: 1}}, TCs: cxi.DefaultTrafficClasses}); err != nil {
		t.Fatal(err)
	}
	want := map[uint16]bool{r.record(t, "ns/a").VNI: true, 1999: true, 3000: true}
	for _, n := range []string{"cxi0", "cxi1"} {
		all, err := r.drvs[n].List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			if s.IsDefault() {
				for _, v := range s.VNIs {
					want[v] = true
				}
			}
		}
	}
	got, err := r.b.eng.InUseVNIs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w := slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
		t.Fatalf("inUseVNIs = %v, want %v", got, w)
	}

	// A NIC that cannot be listed makes no report rather than a partial one.
	r.drvs["cxi1"] = failingList{r.drvs["cxi1"]}
	if got, err := r.b.eng.InUseVNIs(ctx); err == nil {
		t.Fatalf("inUseVNIs with a failing NIC = %v, want an error", got)
	}
}
