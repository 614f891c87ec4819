package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// fabricRig is a Fabric over one simulated NIC, cxi0.
type fabricRig struct {
	f     *Fabric
	sim   *sim.Device
	m     Metrics
	reuse []uint32 // IDs the fabric told of
}

func newFabricRig(t *testing.T) *fabricRig {
	t.Helper()
	s, err := sim.Open(t.TempDir(), "cxi0", sim.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// One destroy attempt, no wait: a busy service is stuck at once.
	once := backoff.Policy{Initial: time.Millisecond, Attempts: 1, Wait: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	r := &fabricRig{sim: s, m: Metrics{
		ServiceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "e"}, []string{"nic", "op"}),
		Stuck:         prometheus.NewCounter(prometheus.CounterOpts{Name: "s"}),
	}}
	drv := DriverMap{"cxi0": cxi.NewClient(uapi.NewDevice(s), cxi.WithDestroyRetry(once))}
	r.f = NewFabric(drv, r.m, func(_ string, id uint32) []string { r.reuse = append(r.reuse, id); return nil }, nil)
	return r
}

type nsHandle struct{ ino uint32 }

func (h *nsHandle) Inode() uint32 { return h.ino }
func (h *nsHandle) Close() error  { return nil }

var spec = cxi.ServiceSpec{VNIs: []uint16{2000}, TCs: cxi.DefaultTrafficClasses}

// TestFabricServiceLifecycle: a service is made unbound, admits nobody
// until bound, then the verified namespace alone; Renew makes it admit
// nobody again; a namespace member cannot be created directly.
func TestFabricServiceLifecycle(t *testing.T) {
	ctx := t.Context()
	r := newFabricRig(t)
	id, err := r.f.Create(ctx, "cxi0", spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.reuse) != 1 || r.reuse[0] != id {
		t.Fatalf("told of new IDs %v, want [%d]", r.reuse, id)
	}
	svc, err := r.f.Get(ctx, "cxi0", id)
	if err != nil || !Unbound(svc) {
		t.Fatalf("a new service: %+v %v, want unbound", svc, err)
	}
	var ns Namespaces
	if n, err := r.f.Bind(ctx, &ns, "pod", &nsHandle{ino: 4026532001}, []Target{{NIC: "cxi0", ID: id}}); n != 1 || err != nil {
		t.Fatalf("bind: %d, %v", n, err)
	}
	if ns.Held("pod") != 4026532001 {
		t.Fatal("the bound namespace is not held")
	}
	if err := r.f.CheckBound(ctx, "cxi0", id, 4026532001, 2000); err != nil {
		t.Fatal(err)
	}
	if err := r.f.CheckBound(ctx, "cxi0", id, 4026532002, 2000); err == nil {
		t.Fatal("a service admitting another namespace passed the check")
	}
	renewed, err := r.f.Renew(ctx, "cxi0", id, spec)
	if err != nil {
		t.Fatal(err)
	}
	if svc, err := r.f.Get(ctx, "cxi0", renewed); err != nil || !Unbound(svc) {
		t.Fatalf("a renewed service: %+v %v, want unbound", svc, err)
	}
	withNetns := spec
	withNetns.Members = []cxi.Member{{Type: cxi.MemberNetNS, ID: 4026532001}}
	if _, err := r.f.Create(ctx, "cxi0", withNetns); !errors.Is(err, cxi.ErrInvalidSpec) {
		t.Fatalf("a service made with a namespace member: %v, want refused (a namespace is admitted by Bind, once verified)", err)
	}
	withUID := spec
	withUID.Members = []cxi.Member{{Type: cxi.MemberUID, ID: 1000}}
	uid, err := r.f.Create(ctx, "cxi0", withUID)
	if err != nil {
		t.Fatal(err)
	}
	if svc, _ := r.f.Get(ctx, "cxi0", uid); !svc.Enabled || len(svc.Members) != 1 || svc.Members[0] != withUID.Members[0] {
		t.Fatalf("the fallback member's service: %+v", svc)
	}
}

// TestFabricCounts: a destroy of a service already gone, or on a NIC no
// longer there, succeeds; one still busy is counted stuck; failed creates
// and binds are counted by NIC and op.
func TestFabricCounts(t *testing.T) {
	ctx := t.Context()
	r := newFabricRig(t)
	id, err := r.f.Create(ctx, "cxi0", spec)
	if err != nil {
		t.Fatal(err)
	}
	var ns Namespaces
	if _, err := r.f.Bind(ctx, &ns, "pod", &nsHandle{ino: 4026532001}, []Target{{NIC: "cxi0", ID: id}}); err != nil {
		t.Fatal(err)
	}
	if err := r.sim.SetInUse(id, 1); err != nil {
		t.Fatal(err)
	}
	if err := r.f.Destroy(ctx, "cxi0", id); !errors.Is(err, cxi.ErrBusy) {
		t.Fatalf("destroy of a busy service: %v, want ErrBusy", err)
	}
	if got := testutil.ToFloat64(r.m.Stuck); got != 1 {
		t.Fatalf("stuck = %v, want 1", got)
	}
	if err := r.sim.SetInUse(id, 0); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name string
		nic  string
		id   uint32
	}{{"destroy", "cxi0", id}, {"again, gone", "cxi0", id}, {"on a NIC gone", "cxi9", 7}} {
		if err := r.f.Destroy(ctx, step.nic, step.id); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
	}
	if _, err := r.f.Create(ctx, "cxi0", cxi.ServiceSpec{TCs: cxi.DefaultTrafficClasses}); err == nil {
		t.Fatal("a service without a VNI was made")
	}
	if _, err := r.f.Bind(ctx, &ns, "pod", &nsHandle{ino: 4026532001}, []Target{{NIC: "cxi0", ID: id}}); err == nil {
		t.Fatal("a destroyed service was bound")
	}
	for op, want := range map[string]float64{"create": 1, "bind": 1, "destroy": 0} {
		if got := testutil.ToFloat64(r.m.ServiceErrors.WithLabelValues("cxi0", op)); got != want {
			t.Fatalf("%s errors = %v, want %v", op, got, want)
		}
	}
}

// TestListingLost: a recorded service is lost when the listing lacks its
// ID, or shows it carrying none of the holder's VNIs (the ID handed to
// another's new service); a NIC the listing does not name proves nothing.
func TestListingLost(t *testing.T) {
	l := Listing{"cxi0": {{ID: 3, VNIs: []uint16{2000, 900}}, {ID: 4, VNIs: []uint16{2001}}}}
	for _, tc := range []struct {
		name string
		nic  string
		id   uint32
		vnis []uint16
		want bool
	}{
		{"there", "cxi0", 3, []uint16{2000, 900}, false},
		{"absent", "cxi0", 5, []uint16{2000}, true},
		{"reused by another", "cxi0", 4, []uint16{2000}, true},
		{"lacks a named VNI", "cxi0", 3, []uint16{2000, 901}, true},
		{"NIC not listed", "cxi1", 3, []uint16{2000}, false},
	} {
		if got := l.Lost(tc.nic, tc.id, tc.vnis); got != tc.want {
			t.Errorf("%s: Lost = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLostSortKeepsEachNICsOrder: holders whose services a driver reload
// lost are made again so that on every NIC they come in the order of the
// IDs they had there, whatever order the records are in; a holder of
// cxi0/5 and cxi1/3 goes after holders of cxi0/3 and cxi0/4 (its lowest
// ID, 3, would have put it first and given it cxi0/3). Holders that lost
// nothing come last, in their order.
func TestLostSortKeepsEachNICsOrder(t *testing.T) {
	h := func(uid string) checkpoint.Holder { return checkpoint.Holder{Kind: checkpoint.KindClaim, UID: uid} }
	for _, tc := range []struct {
		name string
		lost map[string][]checkpoint.Service // by holder UID
		in   []string
		want []string
	}{
		{"two NICs", map[string][]checkpoint.Service{
			"two": {{NIC: "cxi0", ID: 5}, {NIC: "cxi1", ID: 3}}, "one-a": {{NIC: "cxi0", ID: 3}}, "one-b": {{NIC: "cxi0", ID: 4}},
		}, []string{"two", "kept", "one-b", "one-a"}, []string{"one-a", "one-b", "two", "kept"}},
		{"a chain across NICs", map[string][]checkpoint.Service{
			"x": {{NIC: "cxi1", ID: 1}}, "y": {{NIC: "cxi1", ID: 2}, {NIC: "cxi0", ID: 9}}, "z": {{NIC: "cxi0", ID: 3}},
		}, []string{"y", "z", "x"}, []string{"x", "z", "y"}},
		{"orders that disagree", map[string][]checkpoint.Service{
			"p": {{NIC: "cxi0", ID: 3}, {NIC: "cxi1", ID: 7}}, "q": {{NIC: "cxi0", ID: 4}, {NIC: "cxi1", ID: 2}},
		}, []string{"p", "q"}, []string{"q", "p"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Lost{NICs: map[string][]string{}, ids: map[string]map[string]uint32{}}
			for uid, svcs := range tc.lost {
				holder := h(uid)
				for _, s := range svcs {
					l.note(holder.ID(), s.NIC, s.ID)
				}
			}
			var holders []checkpoint.Holder
			for _, uid := range tc.in {
				holders = append(holders, h(uid))
			}
			l.Sort(holders)
			var got []string
			for _, x := range holders {
				got = append(got, x.UID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("order %v, want %v", got, tc.want)
			}
		})
	}
}
