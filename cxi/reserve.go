package cxi

import (
	"context"
	"errors"
	"fmt"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// Pools of a NIC that services reserving resources take (cass_core.h,
// cassini_user_defs.h).
const (
	// NumLEPools is how many LE pools a NIC has; pool 0 is shared by the
	// services that reserve no LEs, so NumLEPools-1 services may reserve.
	NumLEPools = 16
	// NumTLEPools is how many TLE pools a NIC has; the default service
	// holds one from module load, so 3 more services may reserve TLEs.
	NumTLEPools = 4
	// MinPoolTLEs is the least a service reserving TLEs gets: the driver
	// raises its reservation to it, and sets its maximum to it.
	MinPoolTLEs = 8
)

// Fit asks [Client.Create] and [Client.CreateUnbound] to fit a spec's
// Limits to the NIC, as Slurm's switch/hpe_slingshot does, and to check
// that they fit before the driver is asked.
type Fit struct {
	// AdjustLimits lowers the NIC's maxima by what its system services
	// reserve before the spec's maxima are capped by them (Slurm's
	// adjust_limits).
	AdjustLimits bool
}

// ResourceUsage is one resource of a NIC as its services reserve it.
type ResourceUsage struct {
	// Max is the NIC's maximum (device/properties/num_*).
	Max int
	// Reserved is what every service reserves together, system services
	// included; SystemReserved what system services reserve.
	Reserved, SystemReserved int
	// Holders is how many services reserve some of it.
	Holders int
}

// Free is how much no service reserves.
func (r ResourceUsage) Free() int { return max(r.Max-r.Reserved, 0) }

// Usage is a NIC's resources and pools as its services hold them.
type Usage struct {
	// Resources by uapi.RsrcType.
	Resources [uapi.NumRsrcTypes]ResourceUsage
	// LEPools and TLEPools are the pools services hold (TLE: the default
	// service's among them; LE: pool 0, the shared one, not counted).
	LEPools, TLEPools int
	// Services is how many services the NIC has, Reserving how many of
	// them reserve anything.
	Services, Reserving int
}

// Usage reads the NIC's services and sums what they reserve. A service
// made without resource limits counts as the driver makes it: every
// resource at the NIC's maximum, reserving nothing but a TLE pool.
func (c *Client) Usage(ctx context.Context) (Usage, error) {
	svcs, err := c.List(ctx)
	if err != nil {
		return Usage{}, err
	}
	return c.UsageOf(svcs), nil
}

// UsageOf is Usage of the NIC's services as [Client.List] gave them.
func (c *Client) UsageOf(svcs []Service) Usage {
	var u Usage
	for t := range u.Resources {
		u.Resources[t].Max = c.deviceMax(uapi.RsrcType(t))
	}
	for _, s := range svcs {
		u.Services++
		if s.Limits == nil {
			if !s.IsDefault() {
				u.TLEPools++ // reserve_rsrcs: the TLE entry gets a pool
			}
			continue
		}
		reserving := false
		for t, l := range s.Limits.byType() {
			u.Resources[t].Reserved += int(l.Res)
			if l.Res > 0 {
				u.Resources[t].Holders++
			}
			if s.System {
				u.Resources[t].SystemReserved += int(l.Res)
			}
			reserving = reserving || l.Res > 0
		}
		le, tle := s.Limits.Pools()
		if le {
			u.LEPools++
		}
		if tle {
			u.TLEPools++
		}
		if reserving {
			u.Reserving++
		}
	}
	return u
}

// Pools says which pools of its NIC a service with limits l takes for
// itself (reserve_rsrcs): an LE pool where it reserves LEs, a TLE pool
// where it reserves or may use any TLEs.
func (l Limits) Pools() (lePool, tlePool bool) {
	return l.LEs.Res > 0, l.TLEs.Res > 0 || l.TLEs.Max > 0
}

// Rows lists u for a person: one row per resource, then the LE and TLE
// pools, each with the NIC's maximum, what is reserved and what is free.
func (u Usage) Rows() []UsageRow {
	rows := make([]UsageRow, 0, len(u.Resources)+2)
	for t, r := range u.Resources {
		rows = append(rows, UsageRow{Resource: uapi.RsrcType(t).String(), Max: r.Max, Reserved: r.Reserved, Free: r.Free()})
	}
	// LE pool 0 is the shared one, always in use.
	rows = append(rows,
		UsageRow{Resource: "LE pools", Max: NumLEPools, Reserved: u.LEPools + 1, Free: max(NumLEPools-1-u.LEPools, 0)},
		UsageRow{Resource: "TLE pools", Max: NumTLEPools, Reserved: u.TLEPools, Free: max(NumTLEPools-u.TLEPools, 0)})
	return rows
}

// UsageRow is one resource or pool of a [Usage].
type UsageRow struct {
	Resource            string
	Max, Reserved, Free int
}

// deviceMax is the NIC's maximum of t: its own where known, else the
// Cassini one.
func (c *Client) deviceMax(t uapi.RsrcType) int {
	if m := c.maxima[t]; m != 0 {
		return int(m)
	}
	return cassiniMax[t]
}

// cassiniMax are the Cassini maxima (default_rsrc_limits) by
// uapi.RsrcType, TLEs included (DefaultLimits gives them no maximum).
var cassiniMax = [uapi.NumRsrcTypes]int{
	uapi.RsrcPTE: 2048, uapi.RsrcTXQ: 1024, uapi.RsrcTGQ: 512, uapi.RsrcEQ: 2047,
	uapi.RsrcCT: 2047, uapi.RsrcLE: 16384, uapi.RsrcTLE: 2048, uapi.RsrcAC: 1022,
}

// ErrNoRoom is matched by a *FitError.
var ErrNoRoom = errors.New("the service does not fit on the NIC")

// FitError says why a service's reservations do not fit on a NIC, the way
// Slurm logs the driver's fail_info: the resource or pool, what the
// service asks, what the others reserve and what is free. It matches
// ErrNoRoom and ErrNoResources.
type FitError struct {
	// Resource is the resource ("TLEs") or, with Pool set, the pool's
	// resource.
	Resource string
	// Pool reports that the NIC has no pool of Resource left.
	Pool bool
	// Want is the reservation asked; Reserved what the NIC's services
	// reserve already, Services how many of them reserve some; Free what is left; Max the
	// NIC's maximum. With Pool: Reserved is the pools held, Max the pools
	// there are.
	Want, Reserved, Free, Max, Services int
}

// Error describes what did not fit.
func (e *FitError) Error() string {
	if e.Pool {
		extra := ""
		if e.Resource == "TLEs" {
			extra = ", one of them the default service's"
		} else {
			extra = ", pool 0 being the shared one"
		}
		return fmt.Sprintf("%s: no %s pool left: %d of the NIC's %d are held%s, and a service reserving %s (%d) needs one of its own",
			ErrNoRoom, poolName(e.Resource), e.Reserved, e.Max, extra, e.Resource, e.Want)
	}
	return fmt.Sprintf("%s: %s: %d to reserve, but %d of the NIC's %d are reserved by %d services, %d free",
		ErrNoRoom, e.Resource, e.Want, e.Reserved, e.Max, e.Services, e.Free)
}

func poolName(resource string) string {
	if resource == "TLEs" {
		return "TLE"
	}
	return "LE"
}

// Is reports whether target is ErrNoRoom or ErrNoResources.
func (e *FitError) Is(target error) bool { return target == ErrNoRoom || target == ErrNoResources }

// fitted returns want fitted to the NIC as Slurm's set_desc_limits does
// (each maximum capped by the NIC's, lowered by its system services'
// reservations with adjust; each reservation capped by its maximum), TLEs
// as the driver stores them (a reservation is at least MinPoolTLEs and is
// the maximum too; none is a maximum of 0, which takes no pool), and
// checks that the reservations and pools fit in u. The error is a
// *FitError.
func fitted(want Limits, u Usage, adjust bool) (Limits, error) {
	out := want
	for t, l := range out.byType() {
		r := u.Resources[t]
		devMax := r.Max
		if adjust {
			devMax = max(devMax-r.SystemReserved, 0)
		}
		l.Max = uint16(min(int(l.Max), devMax))
		l.Res = min(l.Res, l.Max)
		if uapi.RsrcType(t) == uapi.RsrcTLE {
			if want.TLEs.Res > 0 {
				l.Res = max(l.Res, MinPoolTLEs)
			}
			l.Max = l.Res
		}
		if int(l.Res) > r.Free() {
			return Limits{}, &FitError{Resource: uapi.RsrcType(t).String(), Want: int(l.Res), Reserved: r.Reserved,
				Free: r.Free(), Max: r.Max, Services: r.Holders}
		}
	}
	if out.LEs.Res > 0 && u.LEPools >= NumLEPools-1 {
		return Limits{}, &FitError{Resource: "LEs", Pool: true, Want: int(out.LEs.Res), Reserved: u.LEPools + 1, Max: NumLEPools}
	}
	if out.TLEs.Res > 0 && u.TLEPools >= NumTLEPools {
		return Limits{}, &FitError{Resource: "TLEs", Pool: true, Want: int(out.TLEs.Res), Reserved: u.TLEPools, Max: NumTLEPools}
	}
	return out, nil
}

// fit fits spec's limits to the NIC under the client's fit lock, which
// the caller holds until the driver has answered, so that two fitted
// specs are never checked against the same free resources.
func (c *Client) fit(ctx context.Context, spec ServiceSpec) (Limits, error) {
	u, err := c.Usage(ctx)
	if err != nil {
		return Limits{}, fmt.Errorf("read the NIC's reservations: %w", err)
	}
	return fitted(*spec.Limits, u, spec.Fit.AdjustLimits)
}
