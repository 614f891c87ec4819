package controller

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// leaseNodes returns the nodes holding key, and whether the lease exists.
func leaseNodes(t *testing.T, svc *Allocator, key string) ([]string, bool) {
	t.Helper()
	leases, _, err := svc.ListLeases()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if l.Key == key {
			return l.Nodes, true
		}
	}
	return nil, false
}

func TestUnusedHoldDropped(t *testing.T) {
	const grace = 2 * time.Minute
	for _, tc := range []struct {
		name string
		// report is what n1 says it uses, in its reports at +1m and +2m1s
		// after its acquire; nil sends no report at all.
		report     func(vni uint16) []uint16
		reacquire  bool // n1 acquires again at +1m
		holdGrace  time.Duration
		wantNodes  []string
		wantUnused int
	}{
		{name: "vni missing past the grace", report: func(uint16) []uint16 { return []uint16{7} },
			wantNodes: []string{"n2"}, wantUnused: 1},
		{name: "empty report past the grace", report: func(uint16) []uint16 { return nil },
			wantNodes: []string{"n2"}, wantUnused: 1},
		{name: "vni in use", report: func(v uint16) []uint16 { return []uint16{7, v} },
			wantNodes: []string{"n1", "n2"}},
		{name: "no report", wantNodes: []string{"n1", "n2"}},
		{name: "acquired again within the grace", report: func(uint16) []uint16 { return nil }, reacquire: true,
			wantNodes: []string{"n1", "n2"}},
		{name: "dropping turned off", report: func(uint16) []uint16 { return nil }, holdGrace: -1,
			wantNodes: []string{"n1", "n2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{HoldGrace: tc.holdGrace})
			ctx := t.Context()
			h.res.addPod("a", "p", job("a", "j"), "")
			l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p"}, "n1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p"}, "n2"); err != nil {
				t.Fatal(err)
			}
			// n2 always names the VNI.
			report := func() {
				t.Helper()
				if err := h.svc.ReportVNIsInUse("n2", []uint16{l.VNI}); err != nil {
					t.Fatal(err)
				}
				if tc.report != nil {
					if err := h.svc.ReportVNIsInUse("n1", tc.report(l.VNI)); err != nil {
						t.Fatal(err)
					}
				}
			}
			h.clock.Advance(time.Minute)
			if tc.reacquire {
				if _, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p"}, "n1"); err != nil {
					t.Fatal(err)
				}
			}
			report()
			if r, err := h.svc.sweep(ctx); err != nil || r.UnusedHolds != 0 {
				t.Fatalf("sweep within the grace: %+v, %v", r, err)
			}
			h.clock.Advance(grace - time.Minute + time.Second)
			report()
			r, err := h.svc.sweep(ctx)
			if err != nil || r.UnusedHolds != tc.wantUnused {
				t.Fatalf("sweep past the grace: %+v, %v; want %d unused holds", r, err, tc.wantUnused)
			}
			if nodes, ok := leaseNodes(t, h.svc, l.Key); !ok || !slices.Equal(nodes, tc.wantNodes) {
				t.Fatalf("holders %v (leased %v), want %v", nodes, ok, tc.wantNodes)
			}
		})
	}
}

// A job lease of a deleted owner whose last holder crashed before it
// recorded the lease is freed once the node's reports show it unused.
func TestUnusedHoldFreesDrainingLease(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	h.res.addPod("a", "p", job("a", "j"), "")
	l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p"}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	h.res.setExists("a", "j", false)
	if _, done, err := h.svc.FinalizeOwner(ctx, *job("a", "j"), true); err != nil || done {
		t.Fatalf("finalize while n1 holds it: done %v, %v", done, err)
	}
	h.clock.Advance(3 * time.Minute)
	if err := h.svc.ReportVNIsInUse("n1", nil); err != nil {
		t.Fatal(err)
	}
	r, err := h.svc.sweep(ctx)
	if err != nil || r.UnusedHolds != 1 || r.Freed != 1 {
		t.Fatalf("sweep: %+v, %v; want the hold dropped and the vni freed", r, err)
	}
	if _, ok := leaseNodes(t, h.svc, l.Key); ok {
		t.Fatalf("lease %s still exists", l.Key)
	}
}

// After a restart the controller does not know when holds were acquired:
// it counts the grace from the first sweep that sees a report lack them.
func TestUnusedHoldAfterRestartWaitsTheGrace(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	h.res.addPod("a", "p", job("a", "j"), "")
	l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p"}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	h.stop()
	h.clock.Advance(time.Hour)
	svc, _ := start(t, h.path, h.res, Config{Now: h.clock.Now})
	if err := svc.ReportVNIsInUse("n1", nil); err != nil {
		t.Fatal(err)
	}
	if r, err := svc.sweep(ctx); err != nil || r.UnusedHolds != 0 {
		t.Fatalf("first sweep after the restart: %+v, %v", r, err)
	}
	h.clock.Advance(2*time.Minute + time.Second)
	if err := svc.ReportVNIsInUse("n1", nil); err != nil {
		t.Fatal(err)
	}
	if r, err := svc.sweep(ctx); err != nil || r.UnusedHolds != 1 {
		t.Fatalf("sweep past the grace: %+v, %v", r, err)
	}
	if nodes, ok := leaseNodes(t, svc, l.Key); !ok || len(nodes) != 0 {
		t.Fatalf("holders %v (leased %v), want none; the owner exists, so it stays leased", nodes, ok)
	}
}

func TestReportVNIsInUseRefusesBadNode(t *testing.T) {
	h := newHarness(t, Config{})
	if err := h.svc.ReportVNIsInUse("", []uint16{1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty node: %v, want ErrInvalidArgument", err)
	}
}
