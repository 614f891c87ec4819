package ipam_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/ipam/ipamtest"
)

// hsn0 is a /16 in /24 slices, as the chart's example.
var hsn0 = ipam.Pool{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceBits: 24}

// small is a /24 in /28 slices: 16 slices of 16 addresses, so tests
// reach full slices quickly.
var small = ipam.Pool{Name: "small", Prefix: netip.MustParsePrefix("10.9.0.0/24"), SliceBits: 28}

// tiny is a /26 in /29 slices: 8 slices of 8 addresses, so that two
// nodes fill, empty and give back slices within a few hundred steps.
var tiny = ipam.Pool{Name: "tiny", Prefix: netip.MustParsePrefix("10.9.1.0/26"), SliceBits: 29}

type node struct {
	a     *ipam.Allocator
	state string
}

// newNode starts an allocator of node name over ctl with its state under
// dir, and runs one upkeep pass so that its pools are warm.
func newNode(t *testing.T, ctl *ipamtest.Controller, name, dir string, lowWater int) *node {
	t.Helper()
	state := filepath.Join(dir, name+".json")
	a, err := ipam.New(ipam.Options{StatePath: state, Slicer: ctl.Node(name), LowWater: lowWater})
	if err != nil {
		t.Fatal(err)
	}
	ipam.Upkeep(a, context.Background())
	return &node{a: a, state: state}
}

func (n *node) alloc(t *testing.T, owner string, want ...func(*ipam.Request)) netip.Prefix {
	t.Helper()
	req := ipam.Request{Owner: owner, Pool: "hsn0"}
	for _, f := range want {
		f(&req)
	}
	_, pfx, err := n.a.Allocate(context.Background(), req)
	if err != nil {
		t.Fatalf("Allocate(%s): %v", owner, err)
	}
	return pfx
}
