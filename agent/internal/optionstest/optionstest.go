// Package optionstest is a model of per-job service options for the
// randomized interleaving tests of both front ends (agent and agent/dra):
// random requests of the kind a pod's annotation or a claim's
// serviceOptions carry, what the admin's policy of [Config] makes of
// them, and how their reservations fit on a NIC and are stored by the
// driver. It is written apart from the code it checks (internal/jobreq,
// agent/jobpolicy, agent/engine, cxi's reserve.go): its tables are
// Slurm's and the driver's figures, not the agent's, so that a fault in
// that code shows as a difference from the model.
//
// It also reads a simulated NIC's services ([NICOf], [CheckNIC]): what
// the driver holds, not what the agent recorded.
package optionstest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// Config is the agent configuration the worlds run under: hpc may use
// every class and join both named VNIs, ai may add BULK_DATA and join
// storage, web gets the classes everyone gets and joins nothing.
const Config = `
trafficClasses: [LOW_LATENCY, BEST_EFFORT]
jobOptions:
  trafficClasses:
    everyone: [LOW_LATENCY, BEST_EFFORT]
    namespaces:
      hpc: [DEDICATED_ACCESS, BULK_DATA]
      ai: [BULK_DATA]
  maxDepth: 256
  extraVNIs:
  - {name: storage, vni: 900, namespaces: [hpc, ai]}
  - {name: scratch, vni: 901, namespaces: [hpc]}
`

// Namespaces are the namespaces pods and claims of the worlds run in.
var Namespaces = []string{"hpc", "ai", "web"}

// Traffic class bits, as SLINGSHOT_TCS and Slurm's tcs= write them; bit i
// is the driver's class i (enum cxi_traffic_class).
const (
	tcDA = 0x1
	tcLL = 0x2
	tcBD = 0x4
	tcBE = 0x8
)

var classBits = map[string]uint8{"DEDICATED_ACCESS": tcDA, "LOW_LATENCY": tcLL, "BULK_DATA": tcBD, "BEST_EFFORT": tcBE}

// The model of Config.
var (
	defaultTCs = uint8(tcLL | tcBE)
	allowedTCs = map[string]uint8{"hpc": tcLL | tcBE | tcDA | tcBD, "ai": tcLL | tcBE | tcBD, "web": tcLL | tcBE}
	named      = map[string]struct {
		vni uint16
		ns  []string
	}{"storage": {900, []string{"hpc", "ai"}}, "scratch": {901, []string{"hpc"}}}
	maxDepth = 256
)

// perRank are Slurm's per-rank defaults and maxima by resource
// (switch_hpe_slingshot.h), but for TLEs' default, 0 (the agent's
// DefaultJobResources says why).
var perRank = [uapi.NumRsrcTypes]struct{ def, max int }{
	uapi.RsrcTXQ: {2, 1024}, uapi.RsrcTGQ: {1, 512}, uapi.RsrcEQ: {2, 2047}, uapi.RsrcCT: {1, 2047},
	uapi.RsrcTLE: {0, 2048}, uapi.RsrcPTE: {6, 2048}, uapi.RsrcLE: {16, 16384}, uapi.RsrcAC: {2, 1022},
}

// cassiniMax are a Cassini NIC's maxima (default_rsrc_limits), what the
// simulated NICs of the worlds have.
var cassiniMax = [uapi.NumRsrcTypes]int{
	uapi.RsrcPTE: 2048, uapi.RsrcTXQ: 1024, uapi.RsrcTGQ: 512, uapi.RsrcEQ: 2047,
	uapi.RsrcCT: 2047, uapi.RsrcLE: 16384, uapi.RsrcTLE: 2048, uapi.RsrcAC: 1022,
}

// The driver's pools (cass_core.h, cassini_user_defs.h).
const (
	numLEPools  = 16 // pool 0 shared by the services reserving no LEs
	numTLEPools = 4  // one held by the default service
	minPoolTLEs = 8
)

// RandomRequest returns a random request, or ok false for a holder that
// asks for nothing (40%). Some requests ask for what their namespace may
// not have (a class, a named VNI, a depth above maxDepth, a reservation
// above the admin's maximum, a name no VNI has); TLE reservations take
// pools and large LE reservations much of a NIC's LEs, so that NICs run
// out.
func RandomRequest(rng *rand.Rand) (req jobreq.Request, ok bool) {
	if rng.IntN(10) < 4 {
		return req, false
	}
	if rng.IntN(100) < 35 {
		names := []string{"DEDICATED_ACCESS", "LOW_LATENCY", "BULK_DATA", "BEST_EFFORT"}
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		req.TrafficClasses = names[:1+rng.IntN(len(names))]
	}
	switch n := rng.IntN(100); {
	case n < 4:
		req.Depth = maxDepth + 1 + rng.IntN(100)
	case n < 55:
		req.Depth = 1 + rng.IntN(32)
	}
	res := map[string]jobreq.Resource{}
	switch n := rng.IntN(100); {
	case n < 25:
		res["TLEs"] = jobreq.Resource{Res: ptr(1 + rng.IntN(24))}
	case n < 45:
		res["TLEs"] = jobreq.Resource{Def: ptr(1)}
	}
	switch n := rng.IntN(100); {
	case n < 2:
		res["LEs"] = jobreq.Resource{Res: ptr(perRank[uapi.RsrcLE].max + 1 + rng.IntN(1000))}
	case n < 30:
		res["LEs"] = jobreq.Resource{Res: ptr(2000 + rng.IntN(5000))}
	case n < 45 && res["TLEs"] != (jobreq.Resource{}):
		res["LEs"] = jobreq.Resource{Def: ptr(0)} // triggered operations, no LE pool
	}
	if rng.IntN(100) < 10 {
		res["PTEs"] = jobreq.Resource{Max: ptr(16 + rng.IntN(64))} // caps def × depth
	}
	if len(res) > 0 {
		req.Resources = res
	}
	switch n := rng.IntN(100); {
	case n < 30:
		req.VNIs = []string{"storage"}
	case n < 40:
		req.VNIs = []string{"scratch"}
	case n < 48:
		req.VNIs = []string{"scratch", "storage"}
	case n < 50:
		req.VNIs = []string{"nosuch"}
	}
	if req.IsZero() {
		req.Depth = 1
	}
	return req, true
}

func ptr(v int) *int { return &v }

// JSON is the request as an annotation or serviceOptions carries it.
func JSON(req jobreq.Request) string {
	b, err := json.Marshal(req)
	if err != nil {
		panic(err) // a Request always marshals
	}
	return string(b)
}

// Want is what the model says a holder's services must be.
type Want struct {
	// Refused says why the policy refuses the request; "" when it does
	// not.
	Refused string
	// TCs are the traffic classes, as bits.
	TCs uint8
	// Extra are the named VNIs, after the job's, in the order asked.
	Extra []uint16
	// Asked are the limits asked, before they are fitted to a NIC; nil
	// for the node's defaults (no reservation, not fitted).
	Asked *uapi.RsrcLimits
}

// Resolve is what a holder of namespace ns that asked req (asked false:
// nothing) gets, by the model of Config: Slurm's rules for reservations
// (res = def × depth unless given, capped by max; TLEs at least 8 and
// max = res, or none at all).
func Resolve(ns string, req jobreq.Request, asked bool) Want {
	w := Want{TCs: defaultTCs}
	if !asked {
		return w
	}
	if len(req.TrafficClasses) > 0 {
		w.TCs = 0
		for _, name := range req.TrafficClasses {
			bit := classBits[name]
			if bit&allowedTCs[ns] == 0 {
				return Want{Refused: fmt.Sprintf("namespace %s may not use %s", ns, name)}
			}
			w.TCs |= bit
		}
	}
	if req.Depth > maxDepth {
		return Want{Refused: fmt.Sprintf("depth %d is above %d", req.Depth, maxDepth)}
	}
	if req.Depth > 0 || len(req.Resources) > 0 {
		depth := max(req.Depth, 1)
		var l uapi.RsrcLimits
		for t := range uapi.NumRsrcTypes {
			r := req.Resources[t.String()]
			for _, v := range []*int{r.Def, r.Res, r.Max} {
				if v != nil && *v > perRank[t].max {
					return Want{Refused: fmt.Sprintf("%d %s is above the most allowed, %d", *v, t, perRank[t].max)}
				}
			}
			limMax, def := perRank[t].max, perRank[t].def
			if r.Max != nil {
				limMax = *r.Max
			}
			if r.Def != nil {
				def = *r.Def
			}
			res := min(def*depth, limMax)
			if r.Res != nil {
				res = *r.Res
			}
			if t == uapi.RsrcTLE {
				if res > 0 {
					res = max(res, minPoolTLEs)
				}
				limMax = res
			}
			l[t] = uapi.Limits{Max: uint16(limMax), Res: uint16(res)}
		}
		w.Asked = &l
	}
	for _, name := range req.VNIs {
		v, ok := named[name]
		if !ok {
			return Want{Refused: fmt.Sprintf("no VNI is named %q", name)}
		}
		if !slices.Contains(v.ns, ns) {
			return Want{Refused: fmt.Sprintf("namespace %s may not join VNI %q", ns, name)}
		}
		w.Extra = append(w.Extra, v.vni)
	}
	return w
}

// NIC is what a simulated NIC's services hold, as the driver says.
type NIC struct {
	// Reserved is what all services reserve of each resource, System what
	// the system services reserve.
	Reserved, System [uapi.NumRsrcTypes]int
	// LEPools are the LE pools held (pool 0, the shared one, aside),
	// TLEPools the TLE pools (the default service's among them).
	LEPools, TLEPools int
}

// NICOf reads a NIC's state from its services as the simulated driver
// lists them (all of them: the default and system services too).
func NICOf(svcs []sim.Service) NIC {
	var n NIC
	for _, s := range svcs {
		for t, l := range s.Desc.Limits {
			n.Reserved[t] += int(l.Res)
			if s.Desc.IsSystemSvc {
				n.System[t] += int(l.Res)
			}
		}
		if s.LEPool > 0 {
			n.LEPools++
		}
		if s.Desc.Limits[uapi.RsrcTLE].Res > 0 {
			n.TLEPools++
		}
	}
	return n
}

// NoRoom says why a service does not fit on a NIC: a resource short, or
// no pool of it left.
type NoRoom struct {
	Resource string
	Pool     bool
}

func (r NoRoom) String() string {
	if r.Pool {
		return "no " + r.Resource + " pool left"
	}
	return "not enough " + r.Resource
}

// On returns the limits a service of w is stored with on NIC n
// ([Want.Limits]), or, when they do not fit (a reservation above what is
// free, or no pool left, in the order the agent checks them), why.
func (w Want) On(n NIC) (uapi.RsrcLimits, *NoRoom) {
	out := w.Limits(n)
	if w.Asked == nil {
		return out, nil
	}
	for t := range uapi.NumRsrcTypes {
		if int(out[t].Res) > cassiniMax[t]-n.Reserved[t] {
			return out, &NoRoom{Resource: t.String()}
		}
	}
	if out[uapi.RsrcLE].Res > 0 && n.LEPools >= numLEPools-1 {
		return out, &NoRoom{Resource: "LEs", Pool: true}
	}
	if out[uapi.RsrcTLE].Res > 0 && n.TLEPools >= numTLEPools {
		return out, &NoRoom{Resource: "TLEs", Pool: true}
	}
	return out, nil
}

// Limits are the limits a service of w is stored with on NIC n: with
// nothing asked the node's defaults (each resource's maximum the NIC's,
// nothing reserved, no TLEs); otherwise those asked, fitted as Slurm's
// adjust_limits does (each maximum capped by the NIC's less what its
// system services reserve, each reservation by its maximum).
func (w Want) Limits(n NIC) uapi.RsrcLimits {
	var out uapi.RsrcLimits
	if w.Asked == nil {
		for t := range uapi.NumRsrcTypes {
			if t != uapi.RsrcTLE {
				out[t].Max = uint16(cassiniMax[t])
			}
		}
		return out
	}
	for t := range uapi.NumRsrcTypes {
		l := w.Asked[t]
		devMax := max(cassiniMax[t]-n.System[t], 0)
		l.Max = uint16(min(int(l.Max), devMax))
		l.Res = min(l.Res, l.Max)
		if t == uapi.RsrcTLE {
			if w.Asked[t].Res > 0 {
				l.Res = max(l.Res, minPoolTLEs)
			}
			l.Max = l.Res
		}
		out[t] = l
	}
	return out
}

// TCsOf returns a descriptor's traffic classes as bits.
func TCsOf(d uapi.SvcDesc) uint8 {
	var bits uint8
	for tc := uapi.TCDedicatedAccess; tc <= uapi.TCBestEffort; tc++ {
		if d.TCs[tc] {
			bits |= 1 << tc
		}
	}
	return bits
}

// Check returns how service s, the agent's for a holder that wants w,
// differs from it on NIC n: its VNIs (the job's, jobVNI, first, then the
// named ones asked, nothing else), its traffic classes and its limits.
func (w Want) Check(s sim.Service, jobVNI uint16, n NIC) []string {
	var bad []string
	if w.Refused != "" {
		return []string{"it exists, but the policy refuses its holder's request: " + w.Refused}
	}
	want := append([]uint16{jobVNI}, w.Extra...)
	if have := s.Desc.ValidVNIs(); !slices.Equal(have, want) {
		bad = append(bad, fmt.Sprintf("VNIs %v, want %v (the job's, then the named VNIs asked and allowed)", have, want))
	}
	if have := TCsOf(s.Desc); have != w.TCs || !s.Desc.RestrictedTCs {
		bad = append(bad, fmt.Sprintf("traffic classes %#x (restricted %v), want %#x", have, s.Desc.RestrictedTCs, w.TCs))
	}
	limits := w.Limits(n)
	if !s.Desc.ResourceLimits || s.Desc.Limits != limits {
		bad = append(bad, fmt.Sprintf("limits %v (resource_limits %v), want %v", s.Desc.Limits, s.Desc.ResourceLimits, limits))
	}
	return bad
}

// CheckNIC returns what is wrong with a NIC's services as the simulated
// driver holds them: more than its 16 LE or 4 TLE pools held, a pool held
// twice, a service reserving LEs or TLEs without a pool of its own, a
// reservation above its maximum, or more reserved of a resource than the
// NIC has.
func CheckNIC(svcs []sim.Service) []string {
	var bad []string
	lePools := map[int]uint32{}
	tlePools := map[int]uint32{}
	var reserved [uapi.NumRsrcTypes]int
	for _, s := range svcs {
		id := s.Desc.SvcID
		for t, l := range s.Desc.Limits {
			reserved[t] += int(l.Res)
			if l.Res > l.Max {
				bad = append(bad, fmt.Sprintf("service %d reserves %d %s, above its maximum %d", id, l.Res, uapi.RsrcType(t), l.Max))
			}
		}
		les, tles := s.Desc.Limits[uapi.RsrcLE].Res, s.Desc.Limits[uapi.RsrcTLE].Res
		switch {
		case les > 0 && s.LEPool == 0:
			bad = append(bad, fmt.Sprintf("service %d reserves %d LEs from the shared LE pool 0", id, les))
		case les == 0 && s.LEPool != 0:
			bad = append(bad, fmt.Sprintf("service %d reserves no LEs but holds LE pool %d", id, s.LEPool))
		case s.LEPool != 0:
			if other, taken := lePools[s.LEPool]; taken {
				bad = append(bad, fmt.Sprintf("LE pool %d is held by services %d and %d", s.LEPool, other, id))
			}
			lePools[s.LEPool] = id
		}
		if tles > 0 {
			if other, taken := tlePools[s.TLEPool]; taken {
				bad = append(bad, fmt.Sprintf("TLE pool %d is held by services %d and %d", s.TLEPool, other, id))
			}
			tlePools[s.TLEPool] = id
		}
	}
	if n := len(lePools) + 1; n > numLEPools {
		bad = append(bad, fmt.Sprintf("%d LE pools held (pool 0, the shared one, included), more than the NIC's %d", n, numLEPools))
	}
	if n := len(tlePools); n > numTLEPools {
		bad = append(bad, fmt.Sprintf("%d TLE pools held, more than the NIC's %d", n, numTLEPools))
	}
	for t, r := range reserved {
		if r > cassiniMax[t] {
			bad = append(bad, fmt.Sprintf("%d %s reserved, more than the NIC's %d: the driver accepted a reservation beyond what was free", r, uapi.RsrcType(t), cassiniMax[t]))
		}
	}
	return bad
}

// HoldPools makes system services on the simulated NIC dev, as an admin's
// or another stack's would be, that hold lePools LE pools and tlePools
// TLE pools, each reserving a little but the first, which reserves les
// LEs: the worlds' few pods and claims then run out of pools and LEs.
// System services are never the agent's: it neither records nor destroys
// them, and it lowers the maxima it fits reservations to by theirs.
func HoldPools(dev *sim.Device, lePools, tlePools int, les uint16) error {
	d := uapi.NewDevice(dev)
	for i := range max(lePools, tlePools) {
		desc := uapi.SvcDesc{ResourceLimits: true, IsSystemSvc: true, RestrictedMembers: true, RestrictedVNIs: true}
		desc.Members[0] = uapi.SvcMember{Type: uapi.MemberUID, ID: 0}
		desc.Limits[uapi.RsrcPTE] = uapi.Limits{Max: 8, Res: 1}
		if i < lePools {
			res := uint16(32)
			if i == 0 {
				res = max(les, res)
			}
			desc.Limits[uapi.RsrcLE] = uapi.Limits{Max: res, Res: res}
		}
		if i < tlePools {
			desc.Limits[uapi.RsrcTLE] = uapi.Limits{Max: minPoolTLEs, Res: minPoolTLEs}
		}
		if _, _, err := d.AllocService(desc); err != nil {
			return fmt.Errorf("system service %d holding pools: %w", i, err)
		}
	}
	return nil
}

// ServiceIDs are the IDs of every service on the simulated NICs, by NIC:
// what a refused holder must leave as it found it.
func ServiceIDs(sims map[string]*sim.Device) (map[string][]uint32, error) {
	out := map[string][]uint32{}
	for name, dev := range sims {
		svcs, err := dev.Services()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, s := range svcs {
			out[name] = append(out[name], s.Desc.SvcID)
		}
	}
	return out, nil
}

// ReloadDriver is a driver reload on the simulated NIC dev, as the agent
// finds it when it starts again: every service is gone but the default
// one, which the driver makes at load, and the Ethernet service, which
// cxi_eth makes again at once (the simulation keeps it, as one in use
// cannot be destroyed). Other stacks make their system services again
// afterwards ([HoldPools]); the driver hands out the lowest free IDs, so
// theirs and the agent's new ones may carry IDs recorded before.
func ReloadDriver(dev *sim.Device) ([]uint32, error) {
	svcs, err := dev.Services()
	if err != nil {
		return nil, err
	}
	d := uapi.NewDevice(dev)
	var gone []uint32
	for _, s := range svcs {
		if s.Desc.SvcID == uapi.DefaultSvcID || s.LNIs > 0 {
			continue
		}
		if err := d.DestroyService(s.Desc.SvcID); err != nil {
			return gone, fmt.Errorf("driver reload: service %d: %w", s.Desc.SvcID, err)
		}
		gone = append(gone, s.Desc.SvcID)
	}
	return gone, nil
}

// SystemServices counts the system services of a NIC as the simulated
// driver lists them (the Ethernet service's among them): the agent never
// destroys one.
func SystemServices(svcs []sim.Service) int {
	n := 0
	for _, s := range svcs {
		if s.Desc.IsSystemSvc {
			n++
		}
	}
	return n
}

// Inodes hands out network namespace inodes as the kernel does
// (proc_alloc_inum: the lowest free one), above a base. A test says which
// inodes are in use; after a reboot, or namespaces made again while
// others were freed, the next namespace may get an inode a service still
// names.
type Inodes struct {
	// Base is below every inode handed out.
	Base uint32
}

// Next returns the lowest inode above Base for which inUse is false.
func (a Inodes) Next(inUse func(uint32) bool) uint32 {
	for ino := a.Base + 1; ; ino++ {
		if !inUse(ino) {
			return ino
		}
	}
}
