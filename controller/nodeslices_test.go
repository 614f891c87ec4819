package controller

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

func sliceConfig() Config {
	return Config{
		PodVNIRange: vnialloc.Range{Min: 2048, Max: 2175}, PodVNISliceSize: 64,
		IPPools: []slices.PoolSpec{{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceSize: 24}},
	}
}

func TestNodeSlicesThroughService(t *testing.T) {
	h := newHarness(t, sliceConfig())
	ctx := t.Context()
	a, err := h.svc.AcquireSlices(ctx, "n1", slices.PodVNIPool, 1)
	if err != nil || len(a) != 1 || a[0].VNIs != (vnialloc.Range{Min: 2048, Max: 2111}) {
		t.Fatalf("n1 pod-vni slice: %+v %v", a, err)
	}
	if _, err := h.svc.AcquireSlices(ctx, "n2", slices.PodVNIPool, 1); err != nil {
		t.Fatal(err)
	}
	_, err = h.svc.AcquireSlices(ctx, "n3", slices.PodVNIPool, 1)
	var ex *ExhaustedError
	if !errors.As(err, &ex) || ex.Resource != slices.PodVNIPool {
		t.Fatalf("full pod-vni pool: %v", err)
	}
	ip, err := h.svc.AcquireSlices(ctx, "n1", "hsn0", 1)
	if err != nil || ip[0].Prefix != netip.MustParsePrefix("10.150.0.0/24") {
		t.Fatalf("ip slice: %+v %v", ip, err)
	}
	if _, err := h.svc.AcquireSlices(ctx, "n1", "nope", 1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("unknown pool: %v", err)
	}
	// Pods with no owner get FromNodeSlice when a pod range exists.
	h.res.addPod("a", "bare", nil, "")
	if l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "bare"}, "n1"); err != nil || !l.FromNodeSlice || l.VNI != 0 {
		t.Fatalf("bare pod: %+v %v", l, err)
	}
	// Job VNIs never come from the pod range.
	for i := range 200 {
		name := "j" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		h.res.addPod("a", name, job("a", name), "")
		l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: name}, "n1")
		if err != nil || (l.VNI >= 2048 && l.VNI <= 2175) {
			t.Fatalf("job vni %d from the pod range (err %v)", l.VNI, err)
		}
	}
	// n1 heartbeats with one VNI in use and its hsn0 slice closed; n2
	// closes its slice and goes silent, and is reclaimed after ttl+grace;
	// n1's used slice never is.
	held, lost, err := h.svc.RenewSlices(ctx, "n1", []SliceUsage{{Pool: slices.PodVNIPool, Index: 0, Allocated: 1, Open: true},
		{Pool: "hsn0", Index: 0}, {Pool: "hsn0", Index: 77}})
	if err != nil || len(held) != 2 || len(lost) != 1 || lost[0].Index != 77 {
		t.Fatalf("renew: held %+v lost %+v %v", held, lost, err)
	}
	if _, _, err := h.svc.RenewSlices(ctx, "n2", []SliceUsage{{Pool: slices.PodVNIPool, Index: 1}}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Minute + 5*time.Minute + time.Second)
	r, err := h.svc.sweep(ctx)
	if err != nil || r.Reclaimed != 2 || r.Stranded != 1 {
		// n2's pod-vni slice and n1's empty hsn0 slice are reclaimed; n1's
		// pod-vni slice is stranded (node silent, 1 VNI in use).
		t.Fatalf("sweep: %+v %v", r, err)
	}
	if err := h.svc.ReleaseSlice(ctx, "n2", slices.PodVNIPool, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release reclaimed slice: %v", err)
	}
}

func TestPoolChangeInUseRefused(t *testing.T) {
	h := newHarness(t, sliceConfig())
	if _, err := h.svc.AcquireSlices(t.Context(), "n1", "hsn0", 1); err != nil {
		t.Fatal(err)
	}
	h.stop()
	changed := sliceConfig()
	changed.IPPools[0].SliceSize = 25
	changed.Now = h.clock.Now
	st := openStore(t, h.path)
	svc, err := New(st, nil, nil, changed)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Run(t.Context()); !errors.Is(err, ErrConfigConflict) {
		t.Fatalf("Run with changed pool: %v", err)
	}
	// The pod VNI pool is unused, so it may change.
	ok := sliceConfig()
	ok.PodVNIRange = vnialloc.Range{Min: 3000, Max: 3999}
	ok.Now = h.clock.Now
	svc2, stop := start(t, h.path, nil, ok)
	defer stop()
	if _, err := svc2.AcquireSlices(t.Context(), "n1", slices.PodVNIPool, 1); err != nil {
		t.Fatal(err)
	}
}
