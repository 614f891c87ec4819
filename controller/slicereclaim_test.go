package controller

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/slices"
)

// ipConfig has one IP pool, hsn0, of slices /24 of prefix.
func ipConfig(prefix string) Config {
	return Config{IPPools: []slices.PoolSpec{{Name: "hsn0", Prefix: netip.MustParsePrefix(prefix), SliceSize: 24}}}
}

// deletedNodes is a NodeDirectory of the nodes deleted so far.
type deletedNodes struct {
	mu    sync.Mutex
	since map[string]time.Time
}

func (d *deletedNodes) del(node string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.since[node] = at
}

func (d *deletedNodes) NodeGone(node string) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.since[node]
	return at, ok
}

// Issue 17: a node hands out an address from its slice after its last
// heartbeat and goes down. While its Node object stays, the slice is never
// reclaimed: it stays the node's however long the node is silent, no
// other node can lease it, and the node's next heartbeat renews it. Only a
// slice the node last reported closed and empty is taken back. The report
// is durable: the controller restarts between the report and the sweep.
func TestSilentNodeKeepsOpenSlice(t *testing.T) {
	tests := []struct {
		name string
		// report is node-a's last report of its slice; nil sends none, so
		// the slice stays as leased (open, nothing allocated).
		report *SliceUsage
		kept   bool
	}{
		{name: "open, nothing allocated", report: &SliceUsage{Open: true}, kept: true},
		{name: "never reported", kept: true},
		{name: "closed, addresses allocated", report: &SliceUsage{Allocated: 2}, kept: true},
		{name: "closed and empty", report: &SliceUsage{}, kept: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			cfg := ipConfig("10.150.0.0/23") // two slices
			h := newHarness(t, cfg)
			a, err := h.svc.AcquireSlices(ctx, "node-a", "hsn0", 1)
			if err != nil || len(a) != 1 || !a[0].Open {
				t.Fatalf("node-a acquire: %+v %v", a, err)
			}
			idx := a[0].Index
			if tc.report != nil {
				u := *tc.report
				u.Pool, u.Index = "hsn0", idx
				if _, _, err := h.svc.RenewSlices(ctx, "node-a", []SliceUsage{u}); err != nil {
					t.Fatal(err)
				}
			}
			h.stop()
			cfg.Now = h.clock.Now
			svc, _ := start(t, h.path, h.res, cfg)
			// node-a is silent past its lease and the grace period.
			h.clock.Advance(time.Minute + 5*time.Minute + time.Second)
			r, err := svc.sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Reclaimed == 0 && r.Stranded == 1; got != tc.kept || r.Reclaimed+r.Stranded != 1 {
				t.Fatalf("sweep: %+v; want the slice kept: %v", r, tc.kept)
			}
			_, err = svc.AcquireSliceAt(ctx, "node-b", "hsn0", idx)
			var taken *slices.TakenError
			if !tc.kept {
				if err != nil {
					t.Fatalf("node-b cannot lease the reclaimed slice: %v", err)
				}
				return
			}
			if !errors.As(err, &taken) || taken.Node != "node-a" || taken.Index != idx || taken.Slice != "10.150.0.0/24" {
				t.Fatalf("node-b leases node-a's slice: %v", err)
			}
			b, err := svc.AcquireSlices(ctx, "node-b", "hsn0", 1)
			if err != nil || len(b) != 1 || b[0].Index == idx {
				t.Fatalf("node-b acquire: %+v %v", b, err)
			}
			if _, err := svc.AcquireSlices(ctx, "node-b", "hsn0", 2); !errors.Is(err, ErrExhausted) {
				t.Fatalf("node-b takes a second slice of a pool whose other slice is node-a's: %v", err)
			}
			held, lost, err := svc.RenewSlices(ctx, "node-a", []SliceUsage{{Pool: "hsn0", Index: idx, Allocated: 1, Open: true}})
			if err != nil || len(held) != 1 || held[0].Index != idx || held[0].Node != "node-a" || len(lost) != 0 {
				t.Fatalf("node-a back: held %+v lost %+v %v", held, lost, err)
			}
			if r, err := svc.sweep(ctx); err != nil || r.Reclaimed != 0 || r.Stranded != 0 {
				t.Fatalf("sweep after node-a came back: %+v %v", r, err)
			}
		})
	}
}

// Issue 17: once its Node object has been deleted for the grace period, a
// node's slices with nothing allocated are reclaimed, open or not (its
// pods are deleted with it); one with addresses allocated stays.
func TestDeletedNodeSlices(t *testing.T) {
	ctx := t.Context()
	clock := newClock()
	cfg := ipConfig("10.150.0.0/22") // four slices
	cfg.Now = clock.Now
	nodes := &deletedNodes{since: map[string]time.Time{}}
	svc, _ := startNodes(t, filepath.Join(t.TempDir(), "c.db"), nil, nodes, cfg)
	a, err := svc.AcquireSlices(ctx, "node-a", "hsn0", 3)
	if err != nil || len(a) != 3 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	empty, used, closed := a[0].Index, a[1].Index, a[2].Index
	if _, _, err := svc.RenewSlices(ctx, "node-a", []SliceUsage{{Pool: "hsn0", Index: empty, Open: true},
		{Pool: "hsn0", Index: used, Allocated: 3, Open: true}, {Pool: "hsn0", Index: closed}}); err != nil {
		t.Fatal(err)
	}
	nodes.del("node-a", clock.Now())
	clock.Advance(5*time.Minute - time.Second)
	if r, err := svc.sweep(ctx); err != nil || r.Reclaimed != 0 {
		t.Fatalf("sweep within the grace period: %+v %v", r, err)
	}
	clock.Advance(time.Second)
	if r, err := svc.sweep(ctx); err != nil || r.Reclaimed != 2 || r.Stranded != 1 {
		t.Fatalf("sweep after the grace period: %+v %v; want 2 reclaimed, 1 stranded", r, err)
	}
	for _, i := range []int{empty, closed} {
		if _, err := svc.AcquireSliceAt(ctx, "node-b", "hsn0", i); err != nil {
			t.Fatalf("node-b cannot lease reclaimed slice %d: %v", i, err)
		}
	}
	if _, err := svc.AcquireSliceAt(ctx, "node-b", "hsn0", used); !errors.Is(err, slices.ErrTaken) {
		t.Fatalf("node-b leases the slice with addresses: %v", err)
	}
}

func TestAcquireSliceAt(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t, ipConfig("10.150.0.0/16"))
	if _, err := h.svc.AcquireSliceAt(ctx, "node-b", "hsn0", 9); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.AcquireSlices(ctx, "node-full", "hsn0", slices.MaxPerNode); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, node, pool string
		index            int
		// want: the error matched; held: the slices node-a holds after.
		want error
		held []int
	}{
		{"free", "node-a", "hsn0", 200, nil, []int{200}},
		{"held already", "node-a", "hsn0", 200, nil, []int{200}},
		{"second", "node-a", "hsn0", 201, nil, []int{200, 201}},
		{"held by node-b", "node-a", "hsn0", 9, slices.ErrTaken, []int{200, 201}},
		{"past the pool", "node-a", "hsn0", 256, ErrInvalidArgument, []int{200, 201}},
		{"no such pool", "node-a", "hsn9", 1, ErrInvalidArgument, []int{200, 201}},
		{"bad node name", "Node_A", "hsn0", 1, ErrInvalidArgument, nil},
		{"node at its limit", "node-full", "hsn0", 250, ErrExhausted, nil},
	}
	for _, tc := range tests {
		held, err := h.svc.AcquireSliceAt(ctx, tc.node, tc.pool, tc.index)
		if !errors.Is(err, tc.want) {
			t.Fatalf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		if err != nil {
			continue
		}
		var got []int
		for _, s := range held {
			got = append(got, s.Index)
			if !s.Prefix.IsValid() || s.Node != tc.node || !s.Open {
				t.Fatalf("%s: slice %+v", tc.name, s)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.held) {
			t.Fatalf("%s: held %v, want %v", tc.name, got, tc.held)
		}
	}
	// The index error names the field.
	_, err := h.svc.AcquireSliceAt(ctx, "node-a", "hsn0", 256)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "index" {
		t.Fatalf("out of range: %v", err)
	}
}
