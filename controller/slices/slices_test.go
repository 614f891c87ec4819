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
	// b reports one address in use on its first slice.
	b := tb.Held("b")
	if _, lost := tb.Renew("b", map[int]int{b[0].Index: 1, 99: 0}, now, ttl); len(lost) != 1 || lost[0] != 99 {
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
