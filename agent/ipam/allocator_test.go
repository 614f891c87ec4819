package ipam_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/ipam/ipamtest"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

func TestAllocateIsIdempotentAndFromTheNodesSlice(t *testing.T) {
	ctl := ipamtest.NewController(hsn0)
	n := newNode(t, ctl, "n1", t.TempDir(), 4)
	held := ctl.Held("hsn0", "n1")
	if len(held) != 1 {
		t.Fatalf("warm node holds %d slices, want 1", len(held))
	}
	a1 := n.alloc(t, "cni/c1/net1")
	if !held[0].Prefix.Contains(a1.Addr()) || a1.Bits() != 16 {
		t.Fatalf("address %s: want one of slice %s with the pool's /16", a1, held[0].Prefix)
	}
	calls := ctl.Calls()
	if again := n.alloc(t, "cni/c1/net1"); again != a1 {
		t.Fatalf("second Allocate of the same owner = %s, want %s", again, a1)
	}
	a2 := n.alloc(t, "cni/c2/net1")
	if a2 == a1 {
		t.Fatalf("two owners got %s", a1)
	}
	if ctl.Calls() != calls {
		t.Fatalf("allocations from a warm pool called the controller %d times", ctl.Calls()-calls)
	}
	if ok, err := n.a.Release("cni/c1/net1"); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if ok, err := n.a.Release("cni/c1/net1"); ok || err != nil {
		t.Fatalf("second Release = %v, %v, want false, nil", ok, err)
	}
	// Next-fit: the freed address is not the next one handed out.
	if a3 := n.alloc(t, "cni/c3/net1"); a3 == a1 {
		t.Fatalf("freed address %s handed out again at once", a1)
	}
}

func TestAllocateChecksTheRequestAgainstThePools(t *testing.T) {
	ctl := ipamtest.NewController(hsn0, small)
	ctl.Take("hsn0", 77, "other-node")
	n := newNode(t, ctl, "n1", t.TempDir(), 4)
	n.alloc(t, "cni/holder/net1", func(r *ipam.Request) { r.Want.IP = netip.MustParseAddr("10.150.0.9") })
	tests := []struct {
		name    string
		pool    string
		want    string // annotation JSON
		wantErr error
		errHas  string
	}{
		{"ip outside the pool", "hsn0", `{"ip":"10.151.0.5"}`, ipam.ErrInvalidRequest, "10.151.0.5 is outside pool hsn0 (10.150.0.0/16)"},
		{"network address", "hsn0", `{"ip":"10.150.0.0"}`, ipam.ErrInvalidRequest, "network or broadcast"},
		{"broadcast address", "hsn0", `{"ip":"10.150.255.255"}`, ipam.ErrInvalidRequest, "network or broadcast"},
		{"no such pool", "", `{"pool":"hsn9"}`, ipam.ErrInvalidRequest, `no ip pool named "hsn9" (pools: hsn0, small)`},
		{"pool disagrees with the network", "small", `{"pool":"hsn0"}`, ipam.ErrInvalidRequest, "asks for pool hsn0, the network is on pool small"},
		{"subnet outside the pool", "hsn0", `{"subnet":"10.151.3.0/24"}`, ipam.ErrInvalidRequest, "subnet 10.151.3.0/24 is not inside pool hsn0"},
		{"subnet wider than the pool", "hsn0", `{"subnet":"10.0.0.0/8"}`, ipam.ErrInvalidRequest, "not inside pool hsn0"},
		{"address taken", "hsn0", `{"ip":"10.150.0.9"}`, ipam.ErrAddressTaken, "10.150.0.9 of pool hsn0 is held by cni/holder/net1"},
		{"address in another node's slice", "hsn0", `{"ip":"10.150.77.3"}`, ipam.ErrAddressTaken, "leased to node other-node"},
		{"subnet in another node's slice", "hsn0", `{"subnet":"10.150.77.0/26"}`, ipam.ErrAddressTaken, "leased to node other-node"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := netreq.Parse(tt.want)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = n.a.Allocate(context.Background(), ipam.Request{Owner: fmt.Sprintf("cni/x%d/net1", i), Pool: tt.pool, Want: want})
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("Allocate = %v, want %v containing %q", err, tt.wantErr, tt.errHas)
			}
		})
	}
	if got := len(n.a.Inspect().Allocations); got != 1 {
		t.Fatalf("refused requests left %d allocations, want 1", got)
	}
}

func TestAllocateHonoursSubnetAndFixedAddress(t *testing.T) {
	ctl := ipamtest.NewController(hsn0)
	n := newNode(t, ctl, "n1", t.TempDir(), 4)
	// A fixed address outside the node's slices: the node leases the slice
	// that holds it, so no other node can hand it out.
	fixed := netip.MustParseAddr("10.150.200.7")
	got := n.alloc(t, "cni/fixed/net1", func(r *ipam.Request) { r.Want.IP = fixed })
	if got.Addr() != fixed {
		t.Fatalf("fixed address: got %s, want %s", got, fixed)
	}
	if h := ctl.Holder("hsn0", 200); h != "n1" {
		t.Fatalf("slice 200 holder = %q, want n1", h)
	}
	subnet := netip.MustParsePrefix("10.150.201.64/26")
	for i := range 3 {
		got := n.alloc(t, fmt.Sprintf("cni/sub%d/net1", i), func(r *ipam.Request) { r.Want.Subnet = subnet })
		if !subnet.Contains(got.Addr()) {
			t.Fatalf("subnet request got %s, outside %s", got, subnet)
		}
	}
	// An owner that has an address keeps it; a request that excludes it
	// is an error, not a second address.
	_, _, err := n.a.Allocate(context.Background(), ipam.Request{Owner: "cni/fixed/net1", Pool: "hsn0",
		Want: netreq.Request{IP: netip.MustParseAddr("10.150.200.8")}})
	if !errors.Is(err, ipam.ErrInvalidRequest) || !strings.Contains(err.Error(), "already has 10.150.200.7") {
		t.Fatalf("conflicting repeat = %v", err)
	}
}

func TestPoolRunsLowLeasesAheadAndFullPoolNamesIt(t *testing.T) {
	ctl := ipamtest.NewController(small)
	n := newNode(t, ctl, "n1", t.TempDir(), 4)
	alloc := func(owner string) error {
		_, _, err := n.a.Allocate(context.Background(), ipam.Request{Owner: owner, Pool: "small"})
		return err
	}
	// 13 of the first slice's 14 usable addresses (first slice loses the
	// pool's network address): then free < 4 and upkeep leases another.
	for i := range 12 {
		if err := alloc(fmt.Sprintf("cni/c%d/net1", i)); err != nil {
			t.Fatal(err)
		}
	}
	ipam.Upkeep(n.a, context.Background())
	if got := len(ctl.Held("small", "n1")); got != 2 {
		t.Fatalf("after running low the node holds %d slices, want 2 (leased ahead of need)", got)
	}
	ctl.Take("small", 2, "n2")
	for i := 3; i < 16; i++ {
		ctl.Take("small", i, "n2")
	}
	var err error
	for i := 12; err == nil && i < 64; i++ {
		err = alloc(fmt.Sprintf("cni/c%d/net1", i))
	}
	if !errors.Is(err, ipam.ErrPoolFull) || !strings.Contains(err.Error(), "pool small (10.9.0.0/24)") {
		t.Fatalf("full pool: %v, want ErrPoolFull naming the pool", err)
	}
}

func TestReportsMarkSlicesOpenUntilGivenBack(t *testing.T) {
	ctl := ipamtest.NewController(small)
	n := newNode(t, ctl, "n1", t.TempDir(), 2)
	var owners []string
	for i := range 20 {
		o := fmt.Sprintf("cni/c%d/net1", i)
		n.alloc(t, o, func(r *ipam.Request) { r.Pool = "small" })
		owners = append(owners, o)
		ipam.Upkeep(n.a, context.Background())
	}
	for _, r := range n.a.Reports() {
		if !r.Open {
			t.Fatalf("slice %d reported closed while the node allocates from it: %+v", r.Index, r)
		}
	}
	for _, o := range owners {
		if _, err := n.a.Release(o); err != nil {
			t.Fatal(err)
		}
	}
	// Give-back answers are lost: the slice stays returning (reported
	// closed, nothing handed out of it) and is released again later.
	ctl.LoseNext(1)
	ipam.Upkeep(n.a, context.Background())
	var returning int
	for _, r := range n.a.Reports() {
		if !r.Open {
			returning++
		}
	}
	if returning != 1 {
		t.Fatalf("after a lost give-back answer %d slices report closed, want 1: %+v", returning, n.a.Reports())
	}
	for range 4 {
		ipam.Upkeep(n.a, context.Background())
	}
	if got := len(ctl.Held("small", "n1")); got != 1 {
		t.Fatalf("after give-back the node holds %d slices, want 1", got)
	}
	if got := len(n.a.Reports()); got != 1 {
		t.Fatalf("the allocator reports %d slices, want 1", got)
	}
}

// A controller with no IP pool is asked for its pools once, then every
// 60 upkeep passes, not at every pass by every node; a request meanwhile
// says the controller has no pool rather than that it is unreachable.
func TestNoPoolsAskedRarely(t *testing.T) {
	ctl := ipamtest.NewController()
	a, err := ipam.New(ipam.Options{StatePath: filepath.Join(t.TempDir(), "n1.json"), Slicer: ctl.Node("n1")})
	if err != nil {
		t.Fatal(err)
	}
	for range 60 {
		ipam.Upkeep(a, t.Context())
	}
	if n := ctl.Calls(); n != 1 {
		t.Fatalf("%d pool lists in 60 passes, want 1", n)
	}
	ipam.Upkeep(a, t.Context()) // the 60th pass after the first list
	if n := ctl.Calls(); n != 2 {
		t.Fatalf("%d pool lists in 61 passes, want 2", n)
	}
	_, _, err = a.Allocate(t.Context(), ipam.Request{Owner: "cni/c1/net1", Pool: "hsn0"})
	if !errors.Is(err, ipam.ErrInvalidRequest) || !strings.Contains(err.Error(), "no ip pool") {
		t.Fatalf("Allocate = %v, want the controller's lack of pools named", err)
	}
}
