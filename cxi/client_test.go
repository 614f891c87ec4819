package cxi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

const podNetns = 4026532000

// newSim opens a simulated NIC in dir and returns it with the real uapi
// encoding on top.
func newSim(t testing.TB, dir string, opts sim.Options) (*sim.Device, *uapi.Device) {
	t.Helper()
	s, err := sim.Open(dir, "cxi0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, uapi.NewDevice(s)
}

// ours drops the services a booted node has before any client makes one:
// the default service and the system services (cxi_eth's).
func ours(svcs []Service) []Service {
	return slices.DeleteFunc(svcs, func(s Service) bool { return s.IsDefault() || s.System })
}

// simOurs is [ours] for the simulated driver's own view.
func simOurs(t testing.TB, s *sim.Device) []sim.Service {
	t.Helper()
	svcs, err := s.Services()
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(svcs, func(s sim.Service) bool { return s.Desc.SvcID == DefaultServiceID || s.Desc.IsSystemSvc })
}

// countingDevice counts the calls that reach the driver and can fail
// chosen ones.
type countingDevice struct {
	Device
	calls atomic.Int32
	// fail, when set, runs before each call and may return an error
	// instead of calling the driver.
	fail func(op string, id uint32) error
}

func (c *countingDevice) hook(op string, id uint32) error {
	c.calls.Add(1)
	if c.fail != nil {
		return c.fail(op, id)
	}
	return nil
}

func (c *countingDevice) AllocService(d uapi.SvcDesc) (uint32, uapi.FailInfo, error) {
	if err := c.hook("alloc", 0); err != nil {
		return 0, uapi.FailInfo{}, err
	}
	return c.Device.AllocService(d)
}

func (c *countingDevice) DestroyService(id uint32) error {
	if err := c.hook("destroy", id); err != nil {
		return err
	}
	return c.Device.DestroyService(id)
}

func (c *countingDevice) EnableService(id uint32, on bool) error {
	if err := c.hook(fmt.Sprintf("enable=%v", on), id); err != nil {
		return err
	}
	return c.Device.EnableService(id, on)
}

func (c *countingDevice) SetNetns(id, inode uint32) error {
	if err := c.hook("setnetns", id); err != nil {
		return err
	}
	return c.Device.SetNetns(id, inode)
}

func (c *countingDevice) GetService(id uint32) (uapi.SvcDesc, error) {
	if err := c.hook("get", id); err != nil {
		return uapi.SvcDesc{}, err
	}
	return c.Device.GetService(id)
}

func uidSpec(vnis ...uint16) ServiceSpec {
	return ServiceSpec{VNIs: vnis, Members: []Member{{MemberUID, 1000}}, TCs: DefaultTrafficClasses}
}

func netnsSpec(vnis ...uint16) ServiceSpec {
	return ServiceSpec{VNIs: vnis, Members: []Member{{MemberNetNS, podNetns}}, TCs: TCBestEffort}
}

func TestCreateUIDService(t *testing.T) {
	s, dev := newSim(t, t.TempDir(), sim.Options{})
	c := NewClient(dev)
	spec := ServiceSpec{
		VNIs:    []uint16{1024, 2048},
		Members: []Member{{MemberUID, 1000}, {MemberGID, 100}},
		TCs:     TCLowLatency | TCBestEffort,
	}
	svc, err := c.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultLimits()
	want := Service{
		ID: 3, Enabled: true, RestrictedVNIs: true, VNIs: []uint16{1024, 2048},
		RestrictedMembers: true, Members: spec.Members, RestrictedTCs: true, TCs: 0xa, Limits: &def,
	}
	if !equalService(svc, want) {
		t.Fatalf("Create =\n%+v\nwant\n%+v", svc, want)
	}
	// The default limits reserve no pool.
	svcs := simOurs(t, s)
	if got := svcs[0]; got.TLEPool != 0 || got.LEPool != 0 || got.Desc.Limits[uapi.RsrcTLE] != (uapi.Limits{}) {
		t.Fatalf("driver holds %+v", got)
	}
	if !slices.Equal(svcs[0].UIDs, []uint32{1000}) || !slices.Equal(svcs[0].GIDs, []uint32{100}) || svcs[0].Open {
		t.Fatalf("driver ACL %+v", svcs[0])
	}
}

func equalService(a, b Service) bool {
	la, lb := a.Limits, b.Limits
	a.Limits, b.Limits = nil, nil
	if (la == nil) != (lb == nil) || (la != nil && *la != *lb) {
		return false
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func TestCreateNetnsService(t *testing.T) {
	s, dev := newSim(t, t.TempDir(), sim.Options{})
	c := NewClient(dev)
	svc, err := c.Create(t.Context(), netnsSpec(1024))
	if err != nil {
		t.Fatal(err)
	}
	if !svc.Enabled || !slices.Equal(svc.Members, []Member{{MemberNetNS, podNetns}}) || svc.TCs != TCBestEffort {
		t.Fatalf("Create = %+v", svc)
	}
	svcs := simOurs(t, s)
	if len(svcs) != 1 || !slices.Equal(svcs[0].NetNS, []uint32{podNetns}) || len(svcs[0].UIDs) != 0 || svcs[0].Open || svcs[0].RMUEntries != 1 {
		t.Fatalf("driver holds %+v", svcs)
	}
}

func TestCreateValidation(t *testing.T) {
	lim := DefaultLimits()
	lim.EQs.Res = lim.EQs.Max + 1
	tests := []struct {
		name string
		spec ServiceSpec
	}{
		{"no VNIs", ServiceSpec{Members: []Member{{MemberUID, 1}}, TCs: 1}},
		{"five VNIs", uidSpec(1, 2, 3, 4, 5)},
		{"VNI 0", uidSpec(1024, 0)},
		{"duplicate VNI", uidSpec(1024, 1024)},
		{"no members (open service)", ServiceSpec{VNIs: []uint16{1024}, TCs: 1}},
		{"three members", ServiceSpec{VNIs: []uint16{1024}, TCs: 1, Members: []Member{{MemberUID, 1}, {MemberUID, 2}, {MemberGID, 3}}}},
		{"duplicate member", ServiceSpec{VNIs: []uint16{1024}, TCs: 1, Members: []Member{{MemberUID, 1}, {MemberUID, 1}}}},
		{"uid -1", ServiceSpec{VNIs: []uint16{1024}, TCs: 1, Members: []Member{{MemberUID, 0xffffffff}}}},
		{"gid -1", ServiceSpec{VNIs: []uint16{1024}, TCs: 1, Members: []Member{{MemberGID, 0xffffffff}}}},
		{"netns with uid", ServiceSpec{VNIs: []uint16{1024}, TCs: 1, Members: []Member{{MemberNetNS, podNetns}, {MemberUID, 1}}}},
		{"two netns", ServiceSpec{VNIs: []uint16{1024}, TCs: 1, Members: []Member{{MemberNetNS, podNetns}, {MemberNetNS, podNetns + 1}}}},
		{"netns 0", ServiceSpec{VNIs: []uint16{1024}, TCs: 1, Members: []Member{{MemberNetNS, 0}}}},
		{"netns -1", ServiceSpec{VNIs: []uint16{1024}, TCs: 1, Members: []Member{{MemberNetNS, 0xffffffff}}}},
		{"unknown member type", ServiceSpec{VNIs: []uint16{1024}, TCs: 1, Members: []Member{{MemberType(7), 1}}}},
		{"no traffic class", ServiceSpec{VNIs: []uint16{1024}, Members: []Member{{MemberUID, 1}}}},
		{"ETH traffic class bit", ServiceSpec{VNIs: []uint16{1024}, Members: []Member{{MemberUID, 1}}, TCs: 0x10}},
		{"res above max", ServiceSpec{VNIs: []uint16{1024}, Members: []Member{{MemberUID, 1}}, TCs: 1, Limits: &lim}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
			cd := &countingDevice{Device: dev}
			_, err := NewClient(cd).Create(t.Context(), tc.spec)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Create: %v, want ErrInvalidSpec", err)
			}
			if n := cd.calls.Load(); n != 0 {
				t.Fatalf("%d driver calls for an invalid spec", n)
			}
		})
	}
}

// TestCreateDriverRules runs the driver's capacity and permission rules
// through the client.
func TestCreateDriverRules(t *testing.T) {
	withTLEs := DefaultLimits()
	withTLEs.TLEs = Limit{Max: 8, Res: 8}
	withLEs := DefaultLimits()
	withLEs.LEs = Limit{Max: 1024, Res: 16}
	tests := []struct {
		name  string
		opts  sim.Options
		setup func(t *testing.T, c *Client) // services created first
		spec  ServiceSpec
		check func(t *testing.T, err error)
	}{
		{
			name: "three TLE-reserving services fill the TLE pools",
			setup: func(t *testing.T, c *Client) {
				for i := range 3 {
					s := uidSpec(uint16(1024 + i))
					s.Limits = &withTLEs
					mustCreate(t, c, s)
				}
			},
			spec: ServiceSpec{VNIs: []uint16{2000}, Members: []Member{{MemberUID, 1}}, TCs: 1, Limits: &withTLEs},
			check: func(t *testing.T, err error) {
				var ae *AllocError
				if !errors.Is(err, ErrNoResources) || !errors.Is(err, unix.ENOSPC) || !errors.As(err, &ae) || !ae.Fail.NoTLEPools {
					t.Fatalf("err = %v, want an AllocError with no_tle_pools", err)
				}
			},
		},
		{
			// Pool 0 is shared and cxi_eth's service holds one: 14 are left.
			name: "fourteen LE-reserving services fill the LE pools",
			setup: func(t *testing.T, c *Client) {
				for i := range 14 {
					s := uidSpec(uint16(1024 + i))
					s.Limits = &withLEs
					mustCreate(t, c, s)
				}
			},
			spec: ServiceSpec{VNIs: []uint16{2000}, Members: []Member{{MemberUID, 1}}, TCs: 1, Limits: &withLEs},
			check: func(t *testing.T, err error) {
				var ae *AllocError
				if !errors.As(err, &ae) || !ae.Fail.NoLEPools || ae.Fail.RsrcAvail[uapi.RsrcLE] != 16384-660-14*16 {
					t.Fatalf("err = %v, want an AllocError with no_le_pools", err)
				}
			},
		},
		{
			name: "default limits: hundreds of services until the RMU entries run out",
			setup: func(t *testing.T, c *Client) {
				for i := range 256 {
					mustCreate(t, c, netnsSpecFor(uint16(1024+i), uint32(podNetns+i)))
				}
			},
			spec: netnsSpec(4000),
			check: func(t *testing.T, err error) {
				var ae *AllocError
				if !errors.As(err, &ae) || ae.Fail.NoTLEPools || ae.Fail.NoLEPools {
					t.Fatalf("err = %v, want an AllocError without pool flags", err)
				}
			},
		},
		{
			name: "VF",
			opts: sim.Options{VF: true},
			spec: uidSpec(1024),
			check: func(t *testing.T, err error) {
				if !errors.Is(err, unix.EPERM) || errors.Is(err, ErrNoResources) {
					t.Fatalf("err = %v, want EPERM", err)
				}
			},
		},
		{
			name: "not admin",
			opts: sim.Options{NotAdmin: true},
			spec: netnsSpec(1024),
			check: func(t *testing.T, err error) {
				if !errors.Is(err, unix.EPERM) {
					t.Fatalf("err = %v, want EPERM", err)
				}
			},
		},
		{
			name: "device maxima below the default limits",
			opts: sim.Options{Max: [uapi.NumRsrcTypes]uint16{uapi.RsrcPTE: 1024}},
			spec: uidSpec(1024),
			check: func(t *testing.T, err error) {
				if !errors.Is(err, unix.EINVAL) {
					t.Fatalf("err = %v, want EINVAL", err)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.NoSync = true
			s, dev := newSim(t, t.TempDir(), tc.opts)
			c := NewClient(dev)
			if tc.setup != nil {
				tc.setup(t, c)
			}
			before, _ := s.Services()
			_, err := c.Create(t.Context(), tc.spec)
			tc.check(t, err)
			after, _ := s.Services()
			if len(after) != len(before) {
				t.Fatalf("a failed Create left %d services, had %d", len(after), len(before))
			}
		})
	}
}

// TestCreateOverlappingAVNIRangeIsErrExists: another tool (cxi_service,
// a workload manager) holds the VNI range 1024-2047. The driver refuses a
// service with a VNI inside it with EEXIST, which Create reports as
// ErrExists; two services may still share an exact VNI.
func TestCreateOverlappingAVNIRangeIsErrExists(t *testing.T) {
	tests := []struct {
		name    string
		spec    ServiceSpec
		wantErr bool
	}{
		{"inside the range", uidSpec(1500), true},
		{"the range's first VNI, after one outside", netnsSpec(3000, 1024), true},
		{"outside the range", uidSpec(3000), false},
		{"an exact VNI another service has", uidSpec(2048), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
			rangeDesc := uapi.SvcDesc{RestrictedMembers: true, ResourceLimits: true}
			rangeDesc.Members[0] = uapi.SvcMember{Type: uapi.MemberUID, ID: 2000}
			id, _, err := dev.AllocService(rangeDesc)
			if err != nil {
				t.Fatal(err)
			}
			if err := dev.SetVNIRange(id, 1024, 2047); err != nil {
				t.Fatal(err)
			}
			c := NewClient(dev)
			mustCreate(t, c, uidSpec(2048))
			before, _ := s.Services()
			_, err = c.Create(t.Context(), tc.spec)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("Create: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrExists) || !errors.Is(err, unix.EEXIST) || errors.Is(err, ErrNoResources) {
				t.Fatalf("Create: %v, want ErrExists wrapping EEXIST", err)
			}
			// The error names the service whose range is in the way.
			var ce *ConflictError
			want := fmt.Sprintf("service %d (VNI range 1024-2047, members uid=2000)", id)
			if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].ID != id ||
				*ce.Conflicts[0].VNIRange != (VNIRange{1024, 2047}) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Create: %v, want a ConflictError naming %s", err, want)
			}
			if after, _ := s.Services(); len(after) != len(before) {
				t.Fatalf("a refused Create left %d services, had %d", len(after), len(before))
			}
		})
	}
}

func netnsSpecFor(vni uint16, inode uint32) ServiceSpec {
	s := netnsSpec(vni)
	s.Members = []Member{{MemberNetNS, inode}}
	return s
}

func mustCreate(t *testing.T, c *Client, spec ServiceSpec) Service {
	t.Helper()
	svc, err := c.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create(%+v): %v", spec, err)
	}
	return svc
}

// TestCreateCleansUp fails each step after the allocation and checks that
// the half-made service is destroyed.
func TestCreateCleansUp(t *testing.T) {
	injected := errors.New("injected")
	for _, step := range []string{"enable=false", "setnetns", "enable=true", "get"} {
		t.Run(step, func(t *testing.T) {
			s, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
			cd := &countingDevice{Device: dev, fail: func(op string, _ uint32) error {
				if op == step {
					return injected
				}
				return nil
			}}
			_, err := NewClient(cd).Create(t.Context(), netnsSpec(1024))
			if !errors.Is(err, injected) {
				t.Fatalf("Create: %v, want the injected error", err)
			}
			if svcs := simOurs(t, s); len(svcs) != 0 {
				t.Fatalf("%d services left, want none", len(svcs))
			}
		})
	}
	t.Run("cleanup fails too", func(t *testing.T) {
		s, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
		destroyErr := errors.New("destroy failed")
		cd := &countingDevice{Device: dev, fail: func(op string, _ uint32) error {
			switch op {
			case "setnetns":
				return injected
			case "destroy":
				return destroyErr
			}
			return nil
		}}
		_, err := NewClient(cd).Create(t.Context(), netnsSpec(1024))
		if !errors.Is(err, injected) || !errors.Is(err, destroyErr) {
			t.Fatalf("Create: %v, want both errors", err)
		}
		if svcs := simOurs(t, s); len(svcs) != 1 {
			t.Fatalf("%d services, want the leaked one reported", len(svcs))
		}
	})
	t.Run("RX profile slot taken while disabled", func(t *testing.T) {
		// A real race: while the new service is disabled for
		// SVC_SET_NETNS, another service takes the last RMU entry, so
		// re-enabling fails with ENOSPC and the service must go.
		s, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
		c := NewClient(dev)
		for i := range 255 {
			mustCreate(t, c, netnsSpecFor(uint16(1024+i), uint32(podNetns+i)))
		}
		cd := &countingDevice{Device: dev}
		cd.fail = func(op string, _ uint32) error {
			if op == "setnetns" {
				cd.fail = nil
				mustCreate(t, c, uidSpec(3000))
			}
			return nil
		}
		_, err := NewClient(cd).Create(t.Context(), netnsSpec(4000))
		if !errors.Is(err, unix.ENOSPC) {
			t.Fatalf("Create: %v, want ENOSPC from the enable", err)
		}
		if svcs := simOurs(t, s); len(svcs) != 255+1 {
			t.Fatalf("%d services, want %d", len(svcs), 255+1)
		}
	})
}

// waits records backoff waits instead of sleeping and can act on them.
type waits struct {
	n    int
	onN  func(n int)
	took []time.Duration
}

func (w *waits) wait(ctx context.Context, d time.Duration) error {
	w.n++
	w.took = append(w.took, d)
	if w.onN != nil {
		w.onN(w.n)
	}
	return ctx.Err()
}

func TestDestroy(t *testing.T) {
	t.Run("retries while busy, then succeeds", func(t *testing.T) {
		s, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
		w := &waits{}
		c := NewClient(dev, WithDestroyRetry(backoff.Policy{Initial: time.Second, Attempts: 5, Wait: w.wait}))
		svc := mustCreate(t, c, uidSpec(1024))
		if err := s.SetInUse(svc.ID, 1); err != nil {
			t.Fatal(err)
		}
		w.onN = func(n int) {
			if n == 2 { // the process exits during the second wait
				if err := s.SetInUse(svc.ID, 0); err != nil {
					t.Error(err)
				}
			}
		}
		if err := c.Destroy(t.Context(), svc.ID); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
		if w.n != 2 {
			t.Fatalf("%d waits, want 2", w.n)
		}
		if _, err := c.Get(t.Context(), svc.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get after Destroy: %v, want ErrNotFound", err)
		}
	})
	t.Run("stays busy", func(t *testing.T) {
		s, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
		w := &waits{}
		cd := &countingDevice{Device: dev}
		c := NewClient(cd, WithDestroyRetry(backoff.Policy{Initial: time.Second, Attempts: 3, Wait: w.wait}))
		svc := mustCreate(t, c, uidSpec(1024))
		if err := s.SetInUse(svc.ID, 1); err != nil {
			t.Fatal(err)
		}
		cd.calls.Store(0)
		err := c.Destroy(t.Context(), svc.ID)
		if !errors.Is(err, ErrBusy) || !errors.Is(err, unix.EBUSY) {
			t.Fatalf("Destroy: %v, want ErrBusy", err)
		}
		if cd.calls.Load() != 3 || w.n != 2 {
			t.Fatalf("%d destroy calls and %d waits, want 3 and 2", cd.calls.Load(), w.n)
		}
	})
	t.Run("context ends while busy", func(t *testing.T) {
		s, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
		ctx, cancel := context.WithCancel(t.Context())
		w := &waits{onN: func(int) { cancel() }}
		c := NewClient(dev, WithDestroyRetry(backoff.Policy{Initial: time.Second, Attempts: 10, Wait: w.wait}))
		svc := mustCreate(t, c, uidSpec(1024))
		if err := s.SetInUse(svc.ID, 1); err != nil {
			t.Fatal(err)
		}
		err := c.Destroy(ctx, svc.ID)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrBusy) {
			t.Fatalf("Destroy: %v, want canceled and busy", err)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		_, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
		cd := &countingDevice{Device: dev}
		c := NewClient(cd)
		if err := c.Destroy(t.Context(), DefaultServiceID); !errors.Is(err, ErrDefaultService) {
			t.Fatalf("Destroy(1): %v", err)
		}
		if err := c.Destroy(t.Context(), 0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Destroy(0): %v", err)
		}
		if cd.calls.Load() != 0 {
			t.Fatal("refused destroys reached the driver")
		}
		if err := c.Destroy(t.Context(), 77); !errors.Is(err, ErrNotFound) || !errors.Is(err, unix.EINVAL) {
			t.Fatalf("Destroy(77): %v", err)
		}
	})
	t.Run("VF", func(t *testing.T) {
		dir := t.TempDir()
		_, pf := newSim(t, dir, sim.Options{NoSync: true})
		svc := mustCreate(t, NewClient(pf), uidSpec(1024))
		vf, err := sim.Open(dir, "cxi0", sim.Options{VF: true})
		if err != nil {
			t.Fatal(err)
		}
		defer vf.Close()
		if err := NewClient(uapi.NewDevice(vf)).Destroy(t.Context(), svc.ID); !errors.Is(err, unix.EPERM) {
			t.Fatalf("Destroy on a VF: %v, want EPERM", err)
		}
	})
}

func TestListAndGet(t *testing.T) {
	_, dev := newSim(t, t.TempDir(), sim.Options{})
	c := NewClient(dev)
	uid := mustCreate(t, c, uidSpec(1024))
	ns := mustCreate(t, c, netnsSpec(1025, 1026))
	svcs, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 4 || len(ours(slices.Clone(svcs))) != 2 {
		t.Fatalf("List = %+v", svcs)
	}
	def := svcs[0]
	if !def.IsDefault() || def.Enabled || def.RestrictedMembers || len(def.Members) != 0 ||
		!slices.Equal(def.VNIs, []uint16{1, 10}) || def.TCs != AllTrafficClasses || def.Limits == nil ||
		def.Limits.TLEs != (Limit{Max: 512, Res: 512}) {
		t.Fatalf("default service = %+v (limits %+v)", def, def.Limits)
	}
	if mine := ours(svcs); !equalService(mine[0], uid) || !equalService(mine[1], ns) {
		t.Fatalf("List =\n%+v\n%+v\nwant\n%+v\n%+v", mine[0], mine[1], uid, ns)
	}
	got, err := c.Get(t.Context(), ns.ID)
	if err != nil || !equalService(got, ns) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := c.Get(t.Context(), 99); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(99): %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.List(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("List with a canceled context: %v", err)
	}
	if _, err := c.Create(ctx, uidSpec(5)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with a canceled context: %v", err)
	}
}

// TestListShowsTheEthernetService: on a node whose hsn link is up, cxi_eth
// holds service 2, a system service with an LNI on it, so a client sees it
// in List and cannot destroy it; the client's own services come after it.
func TestListShowsTheEthernetService(t *testing.T) {
	_, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
	w := &waits{}
	c := NewClient(dev, WithDestroyRetry(backoff.Policy{Initial: time.Second, Attempts: 2, Wait: w.wait}))
	mine := mustCreate(t, c, uidSpec(1024))
	svcs, err := c.List(t.Context())
	if err != nil || len(svcs) != 3 {
		t.Fatalf("List = %+v, %v", svcs, err)
	}
	eth := svcs[1]
	if eth.ID != 2 || !eth.System || !eth.Enabled || len(eth.VNIs) != 0 ||
		!slices.Equal(eth.Members, []Member{{MemberUID, 0}}) || mine.ID != 3 {
		t.Fatalf("Ethernet service %+v, ours %d", eth, mine.ID)
	}
	if err := c.Destroy(t.Context(), eth.ID); !errors.Is(err, ErrBusy) {
		t.Fatalf("Destroy(Ethernet service): %v, want ErrBusy", err)
	}
}

// TestRestartRecovery: services outlive the process that made them; a new
// client on a reopened device finds and removes them.
func TestRestartRecovery(t *testing.T) {
	dir := t.TempDir()
	first, err := sim.Open(dir, "cxi0", sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c1 := NewClient(uapi.NewDevice(first))
	made := mustCreate(t, c1, netnsSpec(1024))
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	_, dev := newSim(t, dir, sim.Options{})
	c2 := NewClient(dev)
	svcs, err := c2.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if mine := ours(svcs); len(mine) != 1 || !equalService(mine[0], made) {
		t.Fatalf("after restart: %+v", svcs)
	}
	if err := c2.Destroy(t.Context(), made.ID); err != nil {
		t.Fatal(err)
	}
	if svcs, _ := c2.List(t.Context()); len(ours(svcs)) != 0 {
		t.Fatalf("after cleanup: %+v", svcs)
	}
}

// TestConcurrentClients shares one client between goroutines and adds a
// second client on its own Device of the same NIC.
func TestConcurrentClients(t *testing.T) {
	dir := t.TempDir()
	_, dev := newSim(t, dir, sim.Options{NoSync: true})
	_, dev2 := newSim(t, dir, sim.Options{NoSync: true})
	shared := NewClient(dev)
	other := NewClient(dev2)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		c := shared
		if g == 3 {
			c = other
		}
		wg.Go(func() {
			for r := range 5 {
				spec := netnsSpecFor(uint16(1024+g*10+r), uint32(podNetns+g*10+r))
				svc, err := c.Create(t.Context(), spec)
				if err != nil {
					errs <- err
					return
				}
				if !slices.Equal(svc.Members, spec.Members) || svc.VNIs[0] != spec.VNIs[0] {
					errs <- fmt.Errorf("created %+v for %+v", svc, spec)
					return
				}
				if err := c.Destroy(t.Context(), svc.ID); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if svcs, err := shared.List(t.Context()); err != nil || len(ours(svcs)) != 0 {
		t.Fatalf("left %d services, %v", len(ours(svcs)), err)
	}
}
