package cxi

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// reserving is a spec of uid member i reserving what l says, fitted.
func reserving(i int, l Limits, fit bool) ServiceSpec {
	s := ServiceSpec{VNIs: []uint16{uint16(2000 + i)}, Members: []Member{{Type: MemberUID, ID: uint32(1000 + i)}},
		TCs: DefaultTrafficClasses, Limits: &l}
	if fit {
		s.Fit = &Fit{AdjustLimits: true}
	}
	return s
}

func withTLEs(res uint16) Limits {
	l := DefaultLimits()
	l.TLEs = Limit{Max: res, Res: res}
	return l
}

func withLEs(res uint16) Limits {
	l := DefaultLimits()
	l.LEs = Limit{Max: 16384, Res: res}
	return l
}

// TestFitTLEPools: a NIC has 4 TLE pools and the default service holds
// one, so the fourth TLE-reserving service is refused before the driver
// is asked, with an error naming the pools; the simulated driver, asked
// all the same, refuses it too (fail_info no_tle_pools), as the real one.
func TestFitTLEPools(t *testing.T) {
	ctx := context.Background()
	_, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
	c := NewClient(dev)
	for i := range 3 {
		svc, err := c.Create(ctx, reserving(i, withTLEs(2), true))
		if err != nil {
			t.Fatalf("TLE-reserving service %d: %v", i+1, err)
		}
		if got := svc.Limits.TLEs; got != (Limit{Max: 8, Res: 8}) {
			t.Fatalf("service %d TLEs = %+v, want the driver's minimum pool, 8/8", i+1, got)
		}
	}
	_, err := c.Create(ctx, reserving(3, withTLEs(8), true))
	fe, ok := errors.AsType[*FitError](err)
	if !ok || !fe.Pool || fe.Resource != "TLEs" || !errors.Is(err, ErrNoResources) {
		t.Fatalf("fourth TLE-reserving service: %v, want a *FitError for the TLE pools", err)
	}
	for _, want := range []string{"no TLE pool left", "4 of the NIC's 4 are held", "default service's"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	_, err = c.Create(ctx, reserving(3, withTLEs(8), false))
	if ae, ok := errors.AsType[*AllocError](err); !ok || !ae.Fail.NoTLEPools {
		t.Fatalf("the driver asked for a fourth TLE pool: %v, want ENOSPC with no_tle_pools", err)
	}
	// A service reserving no TLEs takes no pool and still fits.
	if _, err := c.Create(ctx, reserving(4, DefaultLimits(), true)); err != nil {
		t.Fatalf("a service reserving no TLEs: %v", err)
	}
}

// TestFitLEPools: pool 0 is shared and cxi_eth's service holds one, so 14
// services may reserve LEs; the fifteenth is refused by the check and by
// the driver alike.
func TestFitLEPools(t *testing.T) {
	ctx := context.Background()
	_, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
	c := NewClient(dev)
	u, err := c.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	free := NumLEPools - 1 - u.LEPools
	if free != 14 {
		t.Fatalf("LE pools free on a booted NIC = %d, want 14 (pool 0 shared, one the Ethernet service's)", free)
	}
	for i := range free {
		if _, err := c.Create(ctx, reserving(i, withLEs(16), true)); err != nil {
			t.Fatalf("LE-reserving service %d: %v", i+1, err)
		}
	}
	_, err = c.Create(ctx, reserving(free, withLEs(16), true))
	if fe, ok := errors.AsType[*FitError](err); !ok || !fe.Pool || fe.Resource != "LEs" || !strings.Contains(err.Error(), "no LE pool left") {
		t.Fatalf("one LE-reserving service too many: %v, want a *FitError for the LE pools", err)
	}
	_, err = c.Create(ctx, reserving(free, withLEs(16), false))
	if ae, ok := errors.AsType[*AllocError](err); !ok || !ae.Fail.NoLEPools {
		t.Fatalf("the driver asked for one LE pool too many: %v, want ENOSPC with no_le_pools", err)
	}
}

// TestFitReservations: a reservation above what is free is refused naming
// the resource, what the NIC's services reserve and what is free; the
// maxima are capped by the NIC's, less what system services reserve.
func TestFitReservations(t *testing.T) {
	ctx := context.Background()
	_, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true, Max: [uapi.NumRsrcTypes]uint16{uapi.RsrcEQ: 100}})
	c := NewClient(dev, WithDeviceMaxima(sysfs.ResourceMaxima{EQs: 100}))
	u, err := c.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eq := u.Resources[uapi.RsrcEQ]
	if eq.Max != 100 || eq.SystemReserved != 1 || eq.Reserved != 1 {
		t.Fatalf("EQs on a booted NIC = %+v, want max 100 and the Ethernet service's 1 reserved", eq)
	}
	l := DefaultLimits()
	l.EQs = Limit{Max: 2047, Res: 60}
	svc, err := c.Create(ctx, reserving(0, l, true))
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.Limits.EQs; got != (Limit{Max: 99, Res: 60}) {
		t.Fatalf("EQs = %+v, want max 99 (100 less the system service's 1), res 60", got)
	}
	l.EQs.Res = 40
	_, err = c.Create(ctx, reserving(1, l, true))
	fe, ok := errors.AsType[*FitError](err)
	if !ok || fe.Pool || fe.Resource != "EQs" || fe.Want != 40 || fe.Reserved != 61 || fe.Free != 39 || fe.Max != 100 {
		t.Fatalf("EQs over what is free: %v (%+v), want a *FitError: 40 wanted, 61 reserved, 39 free of 100", err, fe)
	}
	if want := "EQs: 40 to reserve, but 61 of the NIC's 100 are reserved by 2 services, 39 free"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q lacks %q", err, want)
	}
	// Without adjust_limits the maximum is the NIC's own.
	l.EQs.Res = 10
	spec := reserving(2, l, true)
	spec.Fit.AdjustLimits = false
	svc, err = c.Create(ctx, spec)
	if err != nil || svc.Limits.EQs != (Limit{Max: 100, Res: 10}) {
		t.Fatalf("without adjust: %+v, %v; want EQs max 100 res 10", svc.Limits, err)
	}
}

func TestFitNeedsLimits(t *testing.T) {
	s := reserving(0, DefaultLimits(), true)
	s.Limits = nil
	if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("Fit without limits: %v, want ErrInvalidSpec", err)
	}
}

// TestUsageRows: a booted NIC's account as inspect and the metrics show
// it: the default service's TLE pool and 512 TLEs, the Ethernet service's
// LE pool.
func TestUsageRows(t *testing.T) {
	_, dev := newSim(t, t.TempDir(), sim.Options{NoSync: true})
	c := NewClient(dev)
	if _, err := c.Create(context.Background(), reserving(0, withTLEs(8), true)); err != nil {
		t.Fatal(err)
	}
	u, err := c.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]UsageRow{}
	for _, r := range u.Rows() {
		rows[r.Resource] = r
	}
	if got := rows["TLEs"]; got != (UsageRow{"TLEs", 2048, 520, 1528}) {
		t.Errorf("TLEs = %+v, want 520 of 2048 reserved (the default service's 512 and 8)", got)
	}
	if got := rows["TLE pools"]; got != (UsageRow{"TLE pools", 4, 2, 2}) {
		t.Errorf("TLE pools = %+v, want 2 of 4 held", got)
	}
	if got := rows["LE pools"]; got != (UsageRow{"LE pools", 16, 2, 14}) {
		t.Errorf("LE pools = %+v, want pool 0 and the Ethernet service's held, 14 free", got)
	}
}
