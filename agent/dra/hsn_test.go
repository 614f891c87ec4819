package dra

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/hsnlink"
	"github.com/slingshot-k8s/slingshot/agent/internal/hsntest"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/ipam/ipamtest"
)

var (
	hsnPool  = ipam.Pool{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceBits: 24}
	railPool = ipam.Pool{Name: "rail1", Prefix: netip.MustParsePrefix("10.151.0.0/16"), SliceBits: 24}
)

// hsnRig is a rig whose NICs have hsn netdevs (cxi0 hsn0, cxi1 hsn1) and
// whose claims' pods get an interface on each, hsn1's from its own pool,
// with a real allocator and a claim status written to a fake API.
type hsnRig struct {
	*rig
	linker *hsntest.Linker
	addrs  *ipam.Allocator
	client *fake.Clientset
}

func newHSNRig(t *testing.T, claims ...*resourceapi.ResourceClaim) *hsnRig {
	t.Helper()
	r := newRig(t)
	h := &hsnRig{rig: r, linker: hsntest.New()}
	h.addrs = hsntest.StartAllocator(t, ipamtest.NewController(hsnPool, railPool).Node("node-a"), t.TempDir()+"/ipam.json")
	r.addrs, r.linker = h.addrs, h.linker
	for i := range r.cfg.NICs {
		r.cfg.NICs[i].Netdev = fmt.Sprintf("hsn%d", i)
	}
	pol := engine.HSNPolicy{Mode: hsnlink.Macvlan, Name: "hsn0", Pool: "hsn0", PoolByNetdev: map[string]string{"hsn1": "rail1"}, AllNICs: true}
	r.cfg.HSN = func() *engine.HSNPolicy { return &pol }
	h.client = fake.NewClientset()
	for _, c := range claims {
		if _, err := h.client.ResourceV1().ResourceClaims(c.Namespace).Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	q := NewStatusQueue(APIClaimStatus{Client: h.client, Driver: testDriver}, nil, nil)
	r.cfg.Status = q
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = q.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r.restart()
	return h
}

// waitNetworkData waits until claim name's status shows, for each NIC
// of want, the network data want names.
func (h *hsnRig) waitNetworkData(t *testing.T, name string, want map[string]resourceapi.NetworkDeviceData) {
	t.Helper()
	var got map[string]resourceapi.NetworkDeviceData
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cl, err := h.client.ResourceV1().ResourceClaims("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = map[string]resourceapi.NetworkDeviceData{}
		for _, d := range cl.Status.Devices {
			if d.NetworkData != nil {
				got[d.Device] = *d.NetworkData
			}
		}
		for nic, w := range want {
			g, ok := got[nic]
			if !ok || g.InterfaceName != w.InterfaceName || g.HardwareAddress != w.HardwareAddress || !slices.Equal(g.IPs, w.IPs) {
				return false, nil
			}
		}
		return len(got) == len(want), nil
	})
	if err != nil {
		t.Fatalf("claim %s's network data %+v, want %+v: %v", name, got, want, err)
	}
}

// TestClaimGetsAnHSNInterfaceOnEachNIC: a claim of two NICs bound to its
// pod's sandbox gives the pod hsn0 on cxi0's netdev and hsn1 on cxi1's,
// each with an address of its rail's pool, and the claim's status names
// them (networkData: interface, address, hardware address). A sandbox
// made again takes them along, the status follows; a restart that finds
// them gone puts them back; Unprepare takes them away and releases both
// addresses.
func TestClaimGetsAnHSNInterfaceOnEachNIC(t *testing.T) {
	ctx := t.Context()
	c := claim("c1", "train-0", "", "cxi0", "cxi1")
	h := newHSNRig(t, c)
	if _, err := h.m.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Bind(ctx, sandbox("train-0", 4026531900)); err != nil {
		t.Fatal(err)
	}
	want := func(ino uint32) map[string]resourceapi.NetworkDeviceData {
		t.Helper()
		out := map[string]resourceapi.NetworkDeviceData{}
		for nic, l := range map[string]struct{ name, netdev, pool string }{
			"cxi0": {"hsn0", "hsn0", "10.150.0.0/16"}, "cxi1": {"hsn1", "hsn1", "10.151.0.0/16"},
		} {
			spec, ok := h.linker.In(ino, l.name)
			if !ok || spec.Parent != l.netdev || !netip.MustParsePrefix(l.pool).Contains(spec.Address.Addr()) {
				t.Fatalf("%s in namespace %d = %+v (present %v), want one on %s with an address of %s", l.name, ino, spec, ok, l.netdev, l.pool)
			}
			out[nic] = resourceapi.NetworkDeviceData{InterfaceName: l.name, IPs: []string{spec.Address.String()}, HardwareAddress: hsntest.MAC(ino, l.name).String()}
		}
		return out
	}
	first := want(4026531900)
	h.waitNetworkData(t, "claim-c1", first)

	// The sandbox made again: the interfaces move, with their addresses.
	if err := h.m.Bind(ctx, sandbox("train-0", 4026531950)); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.linker.In(4026531900, "hsn0"); ok {
		t.Fatal("hsn0 left in the old namespace")
	}
	second := want(4026531950)
	if second["cxi0"].IPs[0] != first["cxi0"].IPs[0] || second["cxi1"].IPs[0] != first["cxi1"].IPs[0] {
		t.Fatalf("addresses changed with the sandbox: %v, then %v", first, second)
	}
	h.waitNetworkData(t, "claim-c1", second)

	// An agent restart that finds them gone puts them back.
	_ = h.linker.Detach(&fakeNetns{inode: 4026531950}, "hsn0")
	h.m.eng.Namespaces().CloseAll()
	h.restart()
	rep, err := h.m.Reconcile(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Held != 1 || h.held("c1") != 4026531950 {
		t.Fatalf("reconcile %+v, held %d: want the claim's namespace held again", rep, h.held("c1"))
	}
	want(4026531950)
	if o := h.addrs.Owners("claim/"); len(o) != 2 {
		t.Fatalf("owners %v, want the claim's two", o)
	}

	if err := h.m.Unprepare(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hsn0", "hsn1"} {
		if _, ok := h.linker.In(4026531950, name); ok {
			t.Fatalf("%s still in the pod's namespace after Unprepare", name)
		}
	}
	if o := h.addrs.Owners("claim/"); len(o) != 0 {
		t.Fatalf("addresses still allocated after Unprepare: %v", o)
	}
	h.checkEmpty()
}

// TestTwoClaimsOfAPodNameTheirInterfacesApart: a pod's second claim's
// interface is numbered after the first's, so that neither takes the
// other's name.
func TestTwoClaimsOfAPodNameTheirInterfacesApart(t *testing.T) {
	ctx := t.Context()
	a := claim("a1", "train-0", `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","envSuffix":"A"}`, "cxi0")
	b := claim("b1", "train-0", `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","envSuffix":"B"}`, "cxi1")
	h := newHSNRig(t, a, b)
	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		if _, err := h.m.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.m.Bind(ctx, sandbox("train-0", 4026531900)); err != nil {
		t.Fatal(err)
	}
	for name, netdev := range map[string]string{"hsn0": "hsn0", "hsn1": "hsn1"} {
		if spec, ok := h.linker.In(4026531900, name); !ok || spec.Parent != netdev {
			t.Fatalf("%s = %+v (present %v), want one on %s", name, spec, ok, netdev)
		}
	}
}

// TestClaimWhoseAddressIsRefusedIsNotBound: a claim whose pod's hsn
// address cannot be allocated (a pool the controller does not have) is
// not bound: the sandbox's bind fails with an error the pod's event tells
// as CXIAddressRefused, the claim's services admit nobody, so its
// containers are refused, and no address is left allocated.
func TestClaimWhoseAddressIsRefusedIsNotBound(t *testing.T) {
	ctx := t.Context()
	c := claim("c1", "train-0", "", "cxi0")
	h := newHSNRig(t, c)
	pol := engine.HSNPolicy{Mode: hsnlink.Macvlan, Name: "hsn0", Pool: "nosuch"}
	h.cfg.HSN = func() *engine.HSNPolicy { return &pol }
	h.restart()
	if _, err := h.m.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	err := h.m.Bind(ctx, sandbox("train-0", 4026531900))
	if !errors.Is(err, ErrNotBound) || !errors.Is(err, engine.ErrAddressRefused) || refusalReason(err) != event.AddressRefused {
		t.Fatalf("Bind = %v (event %s), want ErrNotBound and an address refusal told as %s", err, refusalReason(err), event.AddressRefused)
	}
	for _, s := range h.services("cxi0") {
		if s.Desc.Enable || len(s.NetNS) != 0 {
			t.Fatalf("service %+v after a refused address, want it unbound", s)
		}
	}
	if _, err := h.m.Check(ctx, sandbox("train-0", 4026531900), nil); !errors.Is(err, ErrNotBound) {
		t.Fatalf("container after the refused bind: %v, want ErrNotBound", err)
	}
	if o := h.addrs.Owners("claim/"); len(o) != 0 {
		t.Fatalf("addresses %v allocated for a refused bind", o)
	}
}
