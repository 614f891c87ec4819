package slices

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

func TestPoolCarving(t *testing.T) {
	vp := PoolSpec{Name: "pod-vni", VNIs: vnialloc.Range{Min: 2048, Max: 2147}, SliceSize: 32}
	if err := vp.Validate(); err != nil {
		t.Fatal(err)
	}
	if vp.Count() != 4 || vp.SliceString(0) != "2048-2079" || vp.SliceString(3) != "2144-2147" {
		t.Fatalf("vni carving: count %d, %s, %s", vp.Count(), vp.SliceString(0), vp.SliceString(3))
	}
	ip, err := ParseIPPool("hsn0=10.150.0.0/16:/24")
	if err != nil {
		t.Fatal(err)
	}
	if ip.Count() != 256 || ip.SliceString(0) != "10.150.0.0/24" || ip.SliceString(255) != "10.150.255.0/24" {
		t.Fatalf("ip carving: %d %s %s", ip.Count(), ip.SliceString(0), ip.SliceString(255))
	}
	v6, err := ParseIPPool("hsn1=fd00:1::/48:/64")
	if err != nil || v6.SliceString(1) != "fd00:1:0:1::/64" {
		t.Fatalf("v6: %v %s", err, v6.SliceString(1))
	}
}

func TestParseIPPoolErrors(t *testing.T) {
	for _, in := range []string{"", "hsn0", "hsn0=10.0.0.0/16", "hsn0=10.0.0.1/16:/24", "Bad_Name=10.0.0.0/16:/24",
		"hsn0=10.0.0.0/16:/8", "hsn0=10.0.0.0/8:/32", "hsn0=10.0.0.0/16:/x", "hsn0=nonsense:/24"} {
		if _, err := ParseIPPool(in); !errors.Is(err, ErrBadPool) {
			t.Errorf("ParseIPPool(%q) err = %v, want ErrBadPool", in, err)
		}
	}
}

func TestAcquireRenewReclaim(t *testing.T) {
	spec := PoolSpec{Name: "hsn0", Prefix: netip.MustParsePrefix("10.0.0.0/24"), SliceSize: 26}
	tb, err := NewTable(spec)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	ttl, grace := 30*time.Second, time.Minute
	ops, err := tb.Acquire("a", 1, now, ttl)
	if err != nil || len(ops) != 1 {
		t.Fatalf("Acquire a: %v %v", ops, err)
	}
	if ops, _ := tb.Acquire("a", 1, now, ttl); len(ops) != 0 {
		t.Fatalf("Acquire is not idempotent: %v", ops)
	}
	if _, err := tb.Acquire("b", 3, now, ttl); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Acquire("c", 1, now, ttl); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("Acquire on full pool: %v", err)
	}
	// b reports one address in use on its first slice, and stops
	// allocating from the other two.
	b := tb.Held("b")
	if _, lost := tb.Renew("b", map[int]Usage{b[0].Index: {Allocated: 1, Open: true}, b[1].Index: {}, b[2].Index: {}, 99: {}}, now, ttl); len(lost) != 1 || lost[0] != 99 {
		t.Fatalf("lost = %v, want [99]", lost)
	}
	// a keeps renewing; b goes silent.
	later := now.Add(ttl + grace + time.Second)
	tb.Renew("a", nil, later, ttl)
	ops, stranded := tb.Reclaim(later, grace, nil)
	if len(ops) != 2 || stranded != 1 {
		t.Fatalf("Reclaim: %d ops, %d stranded; want 2 and 1", len(ops), stranded)
	}
	if len(tb.Held("a")) != 1 || len(tb.Held("b")) != 1 {
		t.Fatalf("after reclaim a=%v b=%v", tb.Held("a"), tb.Held("b"))
	}
	// Node a deleted: reclaimed only after the grace period.
	deleted := later
	gone := func(n string) (time.Time, bool) { return deleted, n == "a" }
	if ops, _ := tb.Reclaim(later.Add(grace-time.Second), grace, gone); len(ops) != 0 {
		t.Fatalf("reclaimed within grace: %v", ops)
	}
	if ops, _ := tb.Reclaim(later.Add(grace), grace, gone); len(ops) != 1 {
		t.Fatalf("not reclaimed after grace: %v", ops)
	}
}

func TestLoadRefusesSliceOutsidePool(t *testing.T) {
	tb, _ := NewTable(PoolSpec{Name: "p", VNIs: vnialloc.Range{Min: 100, Max: 199}, SliceSize: 50})
	if err := tb.Load(store.Slice{Pool: "p", Index: 2, Node: "n"}, time.Now(), time.Minute); err == nil {
		t.Fatal("loaded slice 2 of a 2-slice pool")
	}
	if err := tb.Load(store.Slice{Pool: "p", Index: 1, Node: "n"}, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Release("m", 1); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release by other node: %v", err)
	}
	if ops, err := tb.Release("n", 1); err != nil || len(ops) != 1 || tb.Leased() != 0 {
		t.Fatalf("Release: %v %v", ops, err)
	}
}

func TestAcquireAt(t *testing.T) {
	spec := PoolSpec{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceSize: 24}
	now, ttl := time.Unix(1000, 0), time.Minute
	tests := []struct {
		name string
		// before: slices leased first, index → node.
		before map[int]string
		node   string
		index  int
		// wantOps: records written; wantErr: the error matched.
		wantOps int
		wantErr error
	}{
		{name: "free slice", node: "a", index: 7, wantOps: 1},
		{name: "held by the node", before: map[int]string{7: "a"}, node: "a", index: 7},
		{name: "held by another node", before: map[int]string{7: "b"}, node: "a", index: 7, wantErr: ErrTaken},
		{name: "last slice", node: "a", index: 255, wantOps: 1},
		{name: "past the last slice", node: "a", index: 256, wantErr: ErrOutOfRange},
		{name: "negative", node: "a", index: -1, wantErr: ErrOutOfRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb, err := NewTable(spec)
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range tc.before {
				if _, err := tb.AcquireAt(n, i, now, ttl); err != nil {
					t.Fatal(err)
				}
			}
			leased := tb.Leased()
			ops, err := tb.AcquireAt(tc.node, tc.index, now, ttl)
			if !errors.Is(err, tc.wantErr) || len(ops) != tc.wantOps {
				t.Fatalf("AcquireAt(%s, %d) = %d ops, %v; want %d ops, %v", tc.node, tc.index, len(ops), err, tc.wantOps, tc.wantErr)
			}
			if tb.Leased() != leased+tc.wantOps {
				t.Fatalf("%d leased after, %d before", tb.Leased(), leased)
			}
			if tc.wantErr == nil {
				held := tb.Held(tc.node)
				if len(held) != 1 || held[0].Index != tc.index || !held[0].Open || held[0].Node != tc.node {
					t.Fatalf("held: %+v", held)
				}
			}
		})
	}
}

// A slice another node holds is refused with an error that names the
// pool, the slice and the node holding it.
func TestAcquireAtTakenNamesHolder(t *testing.T) {
	tb, _ := NewTable(PoolSpec{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceSize: 24})
	now := time.Unix(1000, 0)
	if _, err := tb.AcquireAt("node-b", 4, now, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := tb.AcquireAt("node-a", 4, now, time.Minute)
	var te *TakenError
	if !errors.As(err, &te) || *te != (TakenError{Pool: "hsn0", Index: 4, Slice: "10.150.4.0/24", Node: "node-b"}) {
		t.Fatalf("err = %#v", err)
	}
	if got := err.Error(); got != "pool hsn0 slice 4 (10.150.4.0/24) is leased to node node-b" {
		t.Fatalf("message %q", got)
	}
}

// AcquireAt counts against MaxPerNode, and next-fit Acquire goes on from
// where it was, not from the named slice.
func TestAcquireAtLimitsAndCursor(t *testing.T) {
	tb, _ := NewTable(PoolSpec{Name: "p", VNIs: vnialloc.Range{Min: 1000, Max: 1000 + 2*MaxPerNode*4 - 1}, SliceSize: 4})
	now := time.Unix(1000, 0)
	if _, err := tb.AcquireAt("a", 100, now, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Acquire("a", 2, now, time.Minute); err != nil {
		t.Fatal(err)
	}
	if held := tb.Held("a"); len(held) != 2 || held[0].Index != 0 || held[1].Index != 100 {
		t.Fatalf("held after Acquire(2): %+v; want slices 0 and 100", held)
	}
	if _, err := tb.Acquire("a", MaxPerNode, now, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.AcquireAt("a", 101, now, time.Minute); !errors.Is(err, ErrNodeFull) {
		t.Fatalf("AcquireAt beyond MaxPerNode: %v", err)
	}
	if _, err := tb.AcquireAt("a", 100, now, time.Minute); err != nil {
		t.Fatalf("AcquireAt of a held slice at MaxPerNode: %v", err)
	}
}

// The reclaim rule: a slice of a node that is only silent is reclaimed
// only when the node last reported it closed and empty; one of a deleted
// node only when it had nothing allocated.
func TestReclaimRule(t *testing.T) {
	ttl, grace := 30*time.Second, time.Minute
	tests := []struct {
		name string
		// report: the node's last report of the slice; none leaves it as
		// leased (open, nothing allocated).
		report *Usage
		// silent: how long after the report the sweep runs; deleted: how
		// long the Node object has been deleted then (0: it exists).
		silent, deleted time.Duration
		reclaimed       bool
		stranded        int
	}{
		{name: "renewed within ttl", report: &Usage{}, silent: ttl},
		{name: "silent within grace", report: &Usage{}, silent: ttl + grace - time.Second},
		{name: "silent, closed and empty", report: &Usage{}, silent: ttl + grace, reclaimed: true},
		{name: "silent, open and empty", report: &Usage{Open: true}, silent: ttl + grace, stranded: 1},
		{name: "silent, never reported (leased open)", silent: ttl + grace, stranded: 1},
		{name: "silent, closed with ids", report: &Usage{Allocated: 2}, silent: ttl + grace, stranded: 1},
		{name: "silent, open with ids", report: &Usage{Allocated: 2, Open: true}, silent: 10 * time.Hour, stranded: 1},
		{name: "deleted, open and empty", report: &Usage{Open: true}, silent: ttl + grace, deleted: grace, reclaimed: true},
		{name: "deleted, never reported", silent: ttl, deleted: grace, reclaimed: true},
		{name: "deleted within grace, open", report: &Usage{Open: true}, silent: ttl + grace, deleted: grace - time.Second, stranded: 1},
		{name: "deleted within grace, closed", report: &Usage{}, silent: ttl + grace, deleted: grace - time.Second, reclaimed: true},
		{name: "deleted, renewing, within grace", report: &Usage{Open: true}, deleted: grace - time.Second},
		{name: "deleted, with ids", report: &Usage{Allocated: 1, Open: true}, silent: ttl + grace, deleted: grace, stranded: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb, _ := NewTable(PoolSpec{Name: "hsn0", Prefix: netip.MustParsePrefix("10.0.0.0/24"), SliceSize: 26})
			start := time.Unix(1000, 0)
			if _, err := tb.Acquire("a", 1, start, ttl); err != nil {
				t.Fatal(err)
			}
			if tc.report != nil {
				tb.Renew("a", map[int]Usage{0: *tc.report}, start, ttl)
			}
			now := start.Add(tc.silent)
			var gone Gone
			if tc.deleted > 0 {
				gone = func(n string) (time.Time, bool) { return now.Add(-tc.deleted), n == "a" }
			}
			ops, stranded := tb.Reclaim(now, grace, gone)
			if (len(ops) == 1) != tc.reclaimed || len(ops) > 1 || stranded != tc.stranded {
				t.Fatalf("Reclaim: %d ops, %d stranded; want reclaimed %v, %d stranded", len(ops), stranded, tc.reclaimed, tc.stranded)
			}
			if held := tb.Held("a"); (len(held) == 0) != tc.reclaimed {
				t.Fatalf("held after Reclaim: %+v", held)
			}
		})
	}
}

// Renew records the open flag and the count; a change of the flag, or of
// whether anything is allocated, is persisted, a change of the count alone
// or of nothing (however much later) is not.
func TestRenewPersistsOpen(t *testing.T) {
	tb, _ := NewTable(PoolSpec{Name: "hsn0", Prefix: netip.MustParsePrefix("10.0.0.0/24"), SliceSize: 26})
	now, ttl := time.Unix(1000, 0), time.Minute
	if _, err := tb.Acquire("a", 1, now, ttl); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		u       Usage
		wantOps int
	}{{Usage{Open: true}, 0}, {Usage{}, 1}, {Usage{}, 0}, {Usage{Open: true}, 1}, {Usage{Allocated: 3, Open: true}, 1},
		{Usage{Allocated: 5, Open: true}, 0}, {Usage{Allocated: 5, Open: true}, 0}, {Usage{Allocated: 5}, 1}, {Usage{}, 1}} {
		now = now.Add(ttl)
		ops, _ := tb.Renew("a", map[int]Usage{0: step.u}, now, ttl)
		if len(ops) != step.wantOps {
			t.Fatalf("Renew %+v: %d ops, want %d", step.u, len(ops), step.wantOps)
		}
		if rec := tb.Held("a")[0]; rec.Open != step.u.Open || rec.Allocated != step.u.Allocated {
			t.Fatalf("after Renew %+v: %+v", step.u, rec)
		}
		if step.wantOps == 1 && ops[0].Record.(*store.Slice).Open != step.u.Open {
			t.Fatalf("op of Renew %+v writes %+v", step.u, ops[0].Record)
		}
	}
}

func TestParsePool(t *testing.T) {
	tests := []struct {
		in   string
		want PoolSpec
	}{
		{"hsn0=10.150.0.0/16/24", PoolSpec{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceSize: 24}},
		{"hsn0=10.150.0.0/16:/24", PoolSpec{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceSize: 24}},
		{" hsn1=fd00:1::/48/64 ", PoolSpec{Name: "hsn1", Prefix: netip.MustParsePrefix("fd00:1::/48"), SliceSize: 64}},
		{"hsn1=fd00:1::/48:/64", PoolSpec{Name: "hsn1", Prefix: netip.MustParsePrefix("fd00:1::/48"), SliceSize: 64}},
		{"pod-vni=vni:2048-4095/64", PoolSpec{Name: "pod-vni", VNIs: vnialloc.Range{Min: 2048, Max: 4095}, SliceSize: 64}},
	}
	for _, tc := range tests {
		got, err := ParsePool(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParsePool(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if again, err := ParsePool(got.String()); err != nil || again != got {
			t.Errorf("ParsePool(%q), of String(): %+v, %v", got.String(), again, err)
		}
	}
	for _, in := range []string{"", "hsn0", "hsn0=", "hsn0=10.0.0.0/16", "hsn0=10.0.0.0/16/", "hsn0=10.0.0.1/16/24",
		"hsn0=10.0.0.0/16/8", "hsn0=10.0.0.0/8/32", "Bad=10.0.0.0/16/24", "p=vni:/4", "p=vni:0-10/4", "p=vni:10-20/0",
		"p=vni:20-10/4", "p=vni:10-20", "p=vni:10.0.0.0/16/24", "hsn0=vni:1-2/1:/24", "hsn0=10.0.0.0/16/x", "=10.0.0.0/16/24"} {
		if _, err := ParsePool(in); !errors.Is(err, ErrBadPool) {
			t.Errorf("ParsePool(%q) err = %v, want ErrBadPool", in, err)
		}
	}
}
