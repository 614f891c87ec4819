package devplugin

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/hsnlink"
	"github.com/slingshot-k8s/slingshot/agent/internal/hsntest"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/ipam/ipamtest"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// networkLeaser answers every lease with the pod's network request, as
// the controller passes its annotation on.
type networkLeaser struct {
	*fakeLeaser
	network map[string]string // pod name → annotation
}

func (l networkLeaser) AcquireJobVNI(ctx context.Context, p controllerclient.PodRef) (controllerclient.Lease, error) {
	lease, err := l.fakeLeaser.AcquireJobVNI(ctx, p)
	lease.NetworkRequest = l.network[p.Name]
	return lease, err
}

var hsnPool = ipam.Pool{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceBits: 24}

// hsnRig is a rig whose NICs have hsn netdevs and whose NIC resource puts
// an hsn interface in its pods, with a real allocator over a controller
// stand-in.
type hsnRig struct {
	*rig
	linker  *hsntest.Linker
	ctl     *ipamtest.Controller
	addrs   *ipam.Allocator
	network map[string]string
}

func newHSNRig(t *testing.T, netns fakeNetns) *hsnRig {
	t.Helper()
	dir := t.TempDir()
	r := newRig(t, dir, nil, netns)
	h := &hsnRig{rig: r, linker: hsntest.New(), ctl: ipamtest.NewController(hsnPool), network: map[string]string{}}
	r.b.nics["cxi0"].netdev = "hsn0"
	r.b.nics["cxi1"].netdev = "hsn1"
	h.addrs = hsntest.StartAllocator(t, h.ctl.Node("n1"), dir+"/ipam.json")
	r.addrs, r.linker = h.addrs, h.linker
	r.useLeaser(t, networkLeaser{fakeLeaser: r.leaser, network: h.network})
	r.b.setPolicy(policy{hsn: map[string]engine.HSNPolicy{res: {Mode: hsnlink.Macvlan, Name: "hsn0", Pool: "hsn0"}}})
	return h
}

// owners are the allocator's owners of pod addresses.
func (h *hsnRig) owners() []string { return h.addrs.Owners("pod/") }

func TestHSNInterfaceFromPreStartToPodExit(t *testing.T) {
	h := newHSNRig(t, fakeNetns{"uid-a": 4026532001})
	h.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	if err := h.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	spec, ok := h.linker.In(4026532001, "hsn0")
	if !ok {
		t.Fatal("no hsn0 in the pod's namespace")
	}
	held := h.ctl.Held("hsn0", "n1")
	inHeld := slices.ContainsFunc(held, func(sl ipam.Slice) bool { return sl.Prefix.Contains(spec.Address.Addr()) })
	if spec.Parent != "hsn0" || spec.Mode != hsnlink.Macvlan || spec.Address.Bits() != 16 || !inHeld {
		t.Fatalf("interface %+v, want a macvlan on hsn0 with a /16 address of the node's slices %v", spec, held)
	}
	entry, _ := h.store.Get("ns/a")
	if entry.HSN == nil || entry.HSN.Address != spec.Address || entry.HSN.Owner != "pod/uid-a/hsn0" {
		t.Fatalf("record %+v, want the interface and its owner", entry.HSN)
	}
	// A container restart finds the same address and interface.
	if err := h.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	if again, _ := h.linker.In(4026532001, "hsn0"); again != spec || len(h.owners()) != 1 {
		t.Fatalf("after a container restart: %+v and owners %v, want %+v and one owner", again, h.owners(), spec)
	}

	h.pods.set()
	if !h.b.cleanupLocked(t.Context(), "ns/a") {
		t.Fatal("cleanup did not finish")
	}
	if _, ok := h.linker.In(4026532001, "hsn0"); ok {
		t.Fatal("hsn0 still in the pod's namespace after cleanup")
	}
	if o := h.owners(); len(o) != 0 {
		t.Fatalf("addresses still allocated after cleanup: %v", o)
	}
}

func TestHSNInterfaceOffByDefault(t *testing.T) {
	h := newHSNRig(t, fakeNetns{"uid-a": 4026532001})
	h.b.setPolicy(policyFrom(config.Default()))
	h.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	if err := h.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	if h.linker.Attaches() != 0 || len(h.owners()) != 0 {
		t.Fatalf("default configuration attached %d interfaces, allocated %v", h.linker.Attaches(), h.owners())
	}
}

func TestHSNNetworkRequest(t *testing.T) {
	cases := []struct {
		name, network string
		ids           []string
		wantAddr      string // the address asked for
		wantParent    string
		wantIface     string
		wantErr       []string // the error names these
	}{
		{name: "fixed address", network: `{"ip":"10.150.7.9"}`, ids: []string{dev0}, wantAddr: "10.150.7.9/16", wantParent: "hsn0", wantIface: "hsn0"},
		{name: "second NIC's netdev and own name", network: `{"netdev":"hsn1","interface":"fabric"}`, ids: []string{dev0, dev1}, wantParent: "hsn1", wantIface: "fabric"},
		{name: "subnet", network: `{"subnet":"10.150.9.0/28"}`, ids: []string{dev0}, wantParent: "hsn0", wantIface: "hsn0"},
		{name: "address outside the pool", network: `{"ip":"10.151.0.1"}`, ids: []string{dev0}, wantErr: []string{"10.151.0.1", "10.150.0.0/16"}},
		{name: "unknown pool", network: `{"pool":"storage"}`, ids: []string{dev0}, wantErr: []string{`"storage"`, "hsn0"}},
		{name: "netdev of no NIC of the pod", network: `{"netdev":"hsn1"}`, ids: []string{dev0}, wantErr: []string{"hsn1", "cxi0 (hsn0)"}},
		{name: "annotation not JSON", network: `ip=10.150.0.1`, ids: []string{dev0}, wantErr: []string{"slingshot.hpe.com/network"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHSNRig(t, fakeNetns{"uid-a": 4026532001})
			h.network["a"] = tc.network
			h.pods.set(pod("ns", "a", "uid-a", "main", tc.ids...))
			err := h.b.PreStart(t.Context(), res, tc.ids)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatal("PreStart succeeded, want an error")
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %q", err, w)
					}
				}
				// Nothing is left of the failed bind.
				if _, ok := h.store.Get("ns/a"); ok || len(h.owners()) != 0 || len(h.services(t, "cxi0")) != 0 || len(h.leaser.held) != 0 {
					t.Fatalf("a failed bind left a record, addresses %v, services or a lease %v", h.owners(), h.leaser.held)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			spec, ok := h.linker.In(4026532001, tc.wantIface)
			if !ok || spec.Parent != tc.wantParent {
				t.Fatalf("interface %s = %+v (present %v), want one on %s", tc.wantIface, spec, ok, tc.wantParent)
			}
			if tc.wantAddr != "" && spec.Address.String() != tc.wantAddr {
				t.Fatalf("address %s, want %s", spec.Address, tc.wantAddr)
			}
			if tc.name == "subnet" && !netip.MustParsePrefix("10.150.9.0/28").Contains(spec.Address.Addr()) {
				t.Fatalf("address %s outside the subnet asked for", spec.Address)
			}
		})
	}
}

func TestHSNFixedAddressTaken(t *testing.T) {
	h := newHSNRig(t, fakeNetns{"uid-a": 4026532001, "uid-b": 4026532002})
	h.network["a"] = `{"ip":"10.150.7.9"}`
	h.network["b"] = `{"ip":"10.150.7.9"}`
	h.pods.set(pod("ns", "a", "uid-a", "main", dev0), pod("ns", "b", "uid-b", "main", dev1))
	if err := h.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	err := h.b.PreStart(t.Context(), res, []string{dev1})
	if !errors.Is(err, ipam.ErrAddressTaken) || !strings.Contains(err.Error(), "10.150.7.9") || !strings.Contains(err.Error(), "pod/uid-a/hsn0") {
		t.Fatalf("second pod's PreStart = %v, want the address taken, naming it and its holder", err)
	}
	// The slice of another node is refused as taken too.
	h.ctl.Take("hsn0", 200, "n2")
	h.network["b"] = `{"ip":"10.150.200.1"}`
	err = h.b.PreStart(t.Context(), res, []string{dev1})
	if !errors.Is(err, ipam.ErrAddressTaken) || !strings.Contains(err.Error(), "n2") {
		t.Fatalf("PreStart for an address of another node's slice = %v, want it taken by n2", err)
	}
}

func TestHSNAttachFailureLeavesNothing(t *testing.T) {
	h := newHSNRig(t, fakeNetns{"uid-a": 4026532001})
	h.linker.FailAttach = errors.New("parent hsn0 not found")
	h.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	err := h.b.PreStart(t.Context(), res, []string{dev0})
	if err == nil || !strings.Contains(err.Error(), "parent hsn0 not found") {
		t.Fatalf("PreStart = %v, want the attach error", err)
	}
	if _, ok := h.store.Get("ns/a"); ok || len(h.owners()) != 0 || len(h.services(t, "cxi0")) != 0 || len(h.leaser.held) != 0 {
		t.Fatalf("a failed attach left a record, addresses %v, services or a lease %v", h.owners(), h.leaser.held)
	}
	// The next try, once the parent is there, succeeds.
	h.linker.FailAttach = nil
	if err := h.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.linker.In(4026532001, "hsn0"); !ok {
		t.Fatal("no interface after the retry")
	}
}

func TestHSNFallbackMemberRefused(t *testing.T) {
	h := newHSNRig(t, fakeNetns{})
	p := h.b.policy()
	p.fallback = &cxi.Member{Type: cxi.MemberUID, ID: 1000}
	h.b.setPolicy(p)
	h.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	err := h.b.PreStart(t.Context(), res, []string{dev0})
	if err == nil || !strings.Contains(err.Error(), "network namespace is not known") {
		t.Fatalf("PreStart = %v, want a refusal: an hsn interface needs the pod's namespace", err)
	}
	if len(h.owners()) != 0 {
		t.Fatalf("addresses %v allocated for a refused bind", h.owners())
	}
}

func TestHSNReconcile(t *testing.T) {
	h := newHSNRig(t, fakeNetns{"uid-a": 4026532001})
	h.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	if err := h.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	spec, _ := h.linker.In(4026532001, "hsn0")
	// A bind that crashed between allocating and recording left an
	// address for a pod the record does not have.
	if _, _, err := h.addrs.Allocate(t.Context(), ipam.Request{Owner: "pod/uid-crashed/hsn0", Pool: "hsn0"}); err != nil {
		t.Fatal(err)
	}
	// The live pod's interface went missing while the agent was down.
	// The interface is gone from the pod's namespace, as after a reboot.
	if err := h.linker.Detach(&fakeHandle{ino: 4026532001}, "hsn0"); err != nil {
		t.Fatal(err)
	}
	h.b.eng.Namespaces().CloseAll()

	if _, err := h.b.Reconcile(t.Context(), ReconcileOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, ok := h.linker.In(4026532001, "hsn0"); !ok || got != spec {
		t.Fatalf("live pod's interface after reconcile = %+v (present %v), want %+v", got, ok, spec)
	}
	if o := h.owners(); len(o) != 1 || o[0] != "pod/uid-a/hsn0" {
		t.Fatalf("owners after reconcile = %v, want only the live pod's", o)
	}
}

var railPool = ipam.Pool{Name: "rail1", Prefix: netip.MustParsePrefix("10.151.0.0/16"), SliceBits: 24}

// TestHSNInterfaceOnEveryNIC: with allNICs, a pod holding two NICs gets
// hsn0 on the first's netdev and hsn1 on the second's, in the order the
// container's devices name them, each with an address of its rail's pool;
// a container restart and an agent restart keep both, and the pod's exit
// takes both away and releases both addresses.
func TestHSNInterfaceOnEveryNIC(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir, nil, fakeNetns{"uid-a": 4026532001})
	linker, ctl := hsntest.New(), ipamtest.NewController(hsnPool, railPool)
	r.b.nics["cxi0"].netdev = "hsn0"
	r.b.nics["cxi1"].netdev = "hsn1"
	addrs := hsntest.StartAllocator(t, ctl.Node("n1"), dir+"/ipam.json")
	r.addrs, r.linker = addrs, linker
	r.useLeaser(t, r.leaser)
	c, err := config.Parse([]byte("nicResource: {hsnInterface: {enabled: true, allNICs: true, poolByNetdev: {hsn1: rail1}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r.b.setPolicy(policyFrom(c))
	r.pods.set(pod("ns", "a", "uid-a", "main", dev1, dev0))

	if err := r.b.PreStart(t.Context(), res, []string{dev1, dev0}); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ parent, pool string }{"hsn0": {"hsn0", "10.150.0.0/16"}, "hsn1": {"hsn1", "10.151.0.0/16"}}
	specs := map[string]hsnlink.Spec{}
	for name, w := range want {
		spec, ok := linker.In(4026532001, name)
		if !ok || spec.Parent != w.parent || !netip.MustParsePrefix(w.pool).Contains(spec.Address.Addr()) {
			t.Fatalf("%s = %+v (present %v), want one on %s with an address of %s", name, spec, ok, w.parent, w.pool)
		}
		specs[name] = spec
	}
	entry, _ := r.store.Get("ns/a")
	if links := entry.HSNLinks(); len(links) != 2 || links[0].Name != "hsn0" || links[1].Name != "hsn1" {
		t.Fatalf("recorded links %+v, want hsn0 then hsn1", links)
	}

	// A container restart, then an agent restart that finds both gone.
	if err := r.b.PreStart(t.Context(), res, []string{dev1, dev0}); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		_ = linker.Detach(&fakeHandle{ino: 4026532001}, name)
	}
	r.b.eng.Namespaces().CloseAll()
	if _, err := r.b.Reconcile(t.Context(), ReconcileOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, spec := range specs {
		if got, ok := linker.In(4026532001, name); !ok || got != spec {
			t.Fatalf("%s after the restarts = %+v (present %v), want %+v", name, got, ok, spec)
		}
	}
	if o := addrs.Owners("pod/"); len(o) != 2 {
		t.Fatalf("owners %v, want the pod's two", o)
	}

	r.pods.set()
	if !r.b.cleanupLocked(t.Context(), "ns/a") {
		t.Fatal("cleanup did not finish")
	}
	for name := range want {
		if _, ok := linker.In(4026532001, name); ok {
			t.Fatalf("%s still in the pod's namespace after cleanup", name)
		}
	}
	if o := addrs.Owners("pod/"); len(o) != 0 {
		t.Fatalf("addresses still allocated after cleanup: %v", o)
	}
}

// TestHSNRestoreFailureIsToldOnThePod: at start, a live pod's hsn
// interface that cannot be put back is told on the pod
// (CXIHSNRestoreFailed, naming the interface and the cause), not only
// logged; the pod keeps its address and record.
func TestHSNRestoreFailureIsToldOnThePod(t *testing.T) {
	h := newHSNRig(t, fakeNetns{"uid-a": 4026532001})
	h.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	if err := h.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	_ = h.linker.Detach(&fakeHandle{ino: 4026532001}, "hsn0")
	h.linker.FailAttach = errors.New("parent hsn0 not found")
	h.b.eng.Namespaces().CloseAll()
	if _, err := h.b.Reconcile(t.Context(), ReconcileOptions{}); err != nil {
		t.Fatal(err)
	}
	got := h.events.Of(event.HSNRestoreFailed)
	if len(got) != 1 || got[0].Obj != event.Pod("ns", "a", "uid-a") || !strings.Contains(got[0].What, "hsn0") || !strings.Contains(got[0].What, "parent hsn0 not found") {
		t.Fatalf("events %+v, want one on ns/a naming hsn0 and the cause", got)
	}
	if o := h.owners(); len(o) != 1 {
		t.Fatalf("owners %v after a failed restore, want the pod's address kept", o)
	}
}
