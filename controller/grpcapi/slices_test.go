package grpcapi

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func hsnConfig() controller.Config {
	return controller.Config{IPPools: []slices.PoolSpec{{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceSize: 24}}}
}

// AcquireSlices with an index leases that slice; another node's slice is
// ALREADY_EXISTS with the holder in the ErrorInfo; a bad index is
// INVALID_ARGUMENT naming the field.
func TestAcquireSliceAtIndex(t *testing.T) {
	c, _ := serve(t, hsnConfig(), true)
	ctx := t.Context()
	at := func(node string, i uint32) (*apiv1.NodeSlices, error) {
		return c.AcquireSlices(ctx, &apiv1.AcquireSlicesRequest{Node: node, Pool: "hsn0", Index: proto.Uint32(i)})
	}
	s, err := at("node-b", 3)
	if err != nil || len(s.Slices) != 1 || s.Slices[0].Prefix != "10.150.3.0/24" || !s.Slices[0].Open || s.Slices[0].Index != 3 {
		t.Fatalf("node-b at 3: %v %v", s, err)
	}
	tests := []struct {
		name   string
		index  uint32
		code   codes.Code
		reason string
		meta   map[string]string
		field  string
	}{
		{name: "taken", index: 3, code: codes.AlreadyExists, reason: ReasonSliceTaken,
			meta: map[string]string{"pool": "hsn0", "index": "3", "slice": "10.150.3.0/24", "node": "node-b"}},
		{name: "past the pool", index: 256, code: codes.InvalidArgument, reason: ReasonInvalid, field: "index"},
		{name: "past any pool", index: 1 << 21, code: codes.InvalidArgument, reason: ReasonInvalid, field: "index"},
	}
	for _, tc := range tests {
		_, err := at("node-a", tc.index)
		if status.Code(err) != tc.code {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.code)
		}
		ei := errorInfo(t, err)
		if ei.Reason != tc.reason || (tc.meta != nil && fmt.Sprint(ei.Metadata) != fmt.Sprint(tc.meta)) {
			t.Fatalf("%s: ErrorInfo %v", tc.name, ei)
		}
		if tc.field != "" {
			var br *errdetails.BadRequest
			for _, d := range status.Convert(err).Details() {
				if b, ok := d.(*errdetails.BadRequest); ok {
					br = b
				}
			}
			if br == nil || br.FieldViolations[0].Field != tc.field {
				t.Fatalf("%s: BadRequest %v", tc.name, br)
			}
		}
	}
	// Index 0 is an index, not "no index": the node gets slice 0, not a
	// next-fit one.
	if s, err := at("node-a", 0); err != nil || len(s.Slices) != 1 || s.Slices[0].Index != 0 {
		t.Fatalf("node-a at 0: %v %v", s, err)
	}
}

// The open flag of a heartbeat's report reaches the lease and comes back
// in the lists; a lost report keeps it.
func TestRenewReportsOpen(t *testing.T) {
	c, _ := serve(t, hsnConfig(), true)
	ctx := t.Context()
	s, err := c.AcquireSlices(ctx, &apiv1.AcquireSlicesRequest{Node: "n1", Pool: "hsn0", Count: 2})
	if err != nil || len(s.Slices) != 2 {
		t.Fatalf("acquire: %v %v", s, err)
	}
	r, err := c.RenewSlices(ctx, &apiv1.RenewSlicesRequest{Node: "n1", Usage: []*apiv1.SliceUsage{
		{Pool: "hsn0", Index: s.Slices[0].Index, Allocated: 2, Open: true},
		{Pool: "hsn0", Index: s.Slices[1].Index},
		{Pool: "hsn0", Index: 99, Allocated: 1, Open: true}}})
	if err != nil || len(r.Held) != 2 || !r.Held[0].Open || r.Held[1].Open || r.Held[0].Allocated != 2 {
		t.Fatalf("renew: %v %v", r, err)
	}
	if len(r.Lost) != 1 || r.Lost[0].Index != 99 || !r.Lost[0].Open || r.Lost[0].Allocated != 1 {
		t.Fatalf("lost: %v", r.Lost)
	}
	ls, err := c.ListSlices(ctx, &apiv1.ListSlicesRequest{Node: "n1"})
	if err != nil || len(ls.Slices) != 2 || !ls.Slices[0].Open || ls.Slices[1].Open {
		t.Fatalf("list: %v %v", ls, err)
	}
	if len(ls.Pools) != 1 || ls.Pools[0].Spec != "hsn0=10.150.0.0/16/24" {
		t.Fatalf("pools: %v", ls.Pools)
	}
	if p, err := slices.ParsePool(ls.Pools[0].Spec); err != nil || p != hsnConfig().IPPools[0] {
		t.Fatalf("listed spec %q parses to %+v, %v", ls.Pools[0].Spec, p, err)
	}
}

// The pod's network request is in every AcquireJobVNI answer.
func TestNetworkRequestInLease(t *testing.T) {
	jobs := controllertest.NewJobs()
	jobs.Add("w-0", controllertest.Job("a", "train"))
	jobs.SetNetworkRequest("a", "w-0", "hsn0")
	c, _ := serveWith(t, controller.Config{}, true, jobs, nil)
	for range 2 {
		l, err := c.AcquireJobVNI(t.Context(), &apiv1.AcquireJobVNIRequest{Pod: &apiv1.PodRef{Namespace: "a", Name: "w-0"}, Node: "n1"})
		if err != nil || l.GetNetworkRequest() != "hsn0" || l.GetVni() == 0 {
			t.Fatalf("acquire: %v %v", l, err)
		}
	}
}
