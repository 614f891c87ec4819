package sim

import (
	"slices"
	"syscall"

	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// Figures of the real driver and hardware (cass_core.h, cassini_user_defs.h,
// cass_svc.c module parameters).
const (
	numTLEPools      = 4          // C_CQ_CFG_TLE_POOL_ENTRIES
	numLEPools       = 16         // CASS_NUM_LE_POOLS; pool 0 is the shared default
	minPoolTLEs      = 8          // CASS_MIN_POOL_TLES
	numRMUEntries    = 256        // C_RMU_CFG_VNI_LIST_ENTRIES: enabled RX profiles
	defaultSvcTLEs   = 512        // module parameter default_svc_num_tles
	invalidACData    = 0xffffffff // (uid_t)-1, (gid_t)-1, (unsigned int)-1
	defaultLNIsPerRG = 1          // CXI_DEFAULT_LNIS_PER_RGID
)

// defaultVNIs is the module parameter default_vnis.
var defaultVNIs = []uint16{1, 10}

// DefaultMax returns the resource maxima of a Cassini NIC
// (default_rsrc_limits; the num_* sysfs properties), indexed by
// uapi.RsrcType: PTE 2048, TXQ 1024, TGQ 512, EQ 2047, CT 2047, LE 16384
// (per processing engine), TLE 2048, AC 1022.
func DefaultMax() [uapi.NumRsrcTypes]uint16 {
	return [uapi.NumRsrcTypes]uint16{
		uapi.RsrcPTE: 2048, uapi.RsrcTXQ: 1024, uapi.RsrcTGQ: 512, uapi.RsrcEQ: 2047,
		uapi.RsrcCT: 2047, uapi.RsrcLE: 16384, uapi.RsrcTLE: 2048, uapi.RsrcAC: 1022,
	}
}

// MaxFromSysfs returns the device maxima a NIC publishes in sysfs
// (device/properties/num_*, as [sysfs.Discover] reads them) in the form of
// [Options.Max], so that a simulated NIC has the limits of the tree it is
// built from and answers EINVAL, as the driver does, to a service that asks
// for more. A value that is 0 (not read) or beyond 16 bits is left 0, which
// takes [DefaultMax].
func MaxFromSysfs(m sysfs.ResourceMaxima) [uapi.NumRsrcTypes]uint16 {
	var out [uapi.NumRsrcTypes]uint16
	for t, v := range map[uapi.RsrcType]int{
		uapi.RsrcPTE: m.PTEs, uapi.RsrcTXQ: m.TXQs, uapi.RsrcTGQ: m.TGQs, uapi.RsrcEQ: m.EQs,
		uapi.RsrcCT: m.CTs, uapi.RsrcLE: m.LEs, uapi.RsrcTLE: m.TLEs, uapi.RsrcAC: m.ACs,
	} {
		if v > 0 && v <= 0xffff {
			out[t] = uint16(v)
		}
	}
	return out
}

// state is one simulated NIC: what the driver keeps in memory.
type state struct {
	Version int `json:"version"`
	// Max holds the device maxima by uapi.RsrcType (LE: per PE).
	Max [uapi.NumRsrcTypes]uint16 `json:"max"`
	// DefaultDisabled mirrors the module parameter disable_default_svc.
	DefaultDisabled bool       `json:"default_disabled"`
	Services        []*service `json:"services"` // sorted by ID
	// Faults are the refusals a test injected ([Device.InjectFault]).
	Faults []Fault `json:"faults,omitempty"`
}

// service is one service: the stored descriptor and the rgroup behind it.
type service struct {
	Desc        uapi.SvcDesc `json:"desc"`
	Name        string       `json:"name"`
	LNIs        int          `json:"lnis"`
	LNIsPerRGID int          `json:"lnis_per_rgid"`
	ACL         acl          `json:"acl"`
	// Rsrc holds the rgroup's resource entries by uapi.RsrcType; nil
	// means none (an LE entry stands for all four PEs).
	Rsrc [uapi.NumRsrcTypes]*uapi.Limits `json:"rsrc"`
	// LEPool is the LE pool the service's LEs come from (0: shared).
	LEPool int `json:"le_pool"`
	// TLEPool is the TLE pool its triggered operations use (0: the
	// default service's pool); OwnsTLEPool says it reserved its own.
	TLEPool     int  `json:"tle_pool"`
	OwnsTLEPool bool `json:"owns_tle_pool"`
	// Profiles is the number of TX/RX profile pairs (one per restricted
	// VNI; none until a VNI range is set otherwise).
	Profiles int `json:"profiles"`
	// Range is the VNI range of a service with restricted_vnis=0, once
	// SVC_SET_VNI_RANGE has set it; nil otherwise.
	Range *vniAttr `json:"range,omitempty"`
	// RMU is the number of RMU VNI-list entries its enabled RX profiles hold.
	RMU int `json:"rmu"`
}

// acl is the rgroup's access-control entry list.
type acl struct {
	Open  bool     `json:"open,omitempty"`
	UIDs  []uint32 `json:"uids,omitempty"`
	GIDs  []uint32 `json:"gids,omitempty"`
	NetNS []uint32 `json:"netns,omitempty"` // sorted
}

// newState is the NIC as a booted node has it: the default service the
// driver makes at module load and, unless opts says there is none, the
// Ethernet service of cxi_eth.
func newState(opts Options) (*state, syscall.Errno) {
	st := &state{Version: stateVersion, Max: opts.Max, DefaultDisabled: !opts.DefaultServiceEnabled}
	for t, m := range st.Max {
		if m == 0 {
			st.Max[t] = DefaultMax()[t]
		}
	}
	desc := uapi.SvcDesc{ResourceLimits: true, RestrictedVNIs: true}
	for tc := uapi.TCDedicatedAccess; tc <= uapi.TCBestEffort; tc++ {
		desc.TCs[tc] = true
	}
	for i, v := range defaultVNIs {
		desc.VNIs[i] = v
		desc.NumVldVNIs++
	}
	for t := range desc.Limits {
		desc.Limits[t] = uapi.Limits{Max: st.Max[t]}
	}
	tles := uint16(max(minPoolTLEs, defaultSvcTLEs))
	desc.Limits[uapi.RsrcTLE] = uapi.Limits{Max: tles, Res: tles}
	id, _, errno := st.alloc(desc, "default")
	if errno != 0 {
		return nil, errno
	}
	st.find(id).LNIsPerRGID = 1 // cxi_rgroup_set_lnis_per_rgid_compat(1)
	if !opts.NoEthernetService {
		st.addEthernetService()
	}
	return st, 0
}

// Figures of cxi_eth at its module parameters' defaults (cxi_eth.c,
// cxi_core.c tg_threshold, cxi_eth.h).
const (
	ethRSSQueues = 16 // max_rss_queues
	ethTXQueues  = 16 // max_tx_queues
	ethMaxLEs    = 16384
	// ethReservedLEs is get_reserved_les: each of the 17 RX queues (RSS
	// and PTP) needs tg_threshold[2] (128) + small_pkts_buf_count (4)
	// LEs, reserved per PE (C_PE_COUNT 4), rounded up: 132 * (4 + 1).
	ethReservedLEs = 660
)

// addEthernetService is what cxi_eth's hw_setup (cxi_eth_ops.c) does on a
// PF when its hsn interface comes up: allocate the system service
// "ethernet-svc" (restricted to the UID that brings the link up, root; no
// VNIs; enabled) and keep one LNI on it while the link is up, so that it
// cannot be destroyed or disabled (EBUSY). It gets the next ID, 2 on a
// node where nothing else came first. Where it does not fit (maxima made
// smaller through Options.Max), hw_setup fails and there is none, as on a
// node where the interface failed to open.
func (st *state) addEthernetService() {
	d := uapi.SvcDesc{ResourceLimits: true, IsSystemSvc: true, RestrictedMembers: true,
		RestrictedVNIs: true, Enable: true}
	d.Members[0] = uapi.SvcMember{Type: uapi.MemberUID, ID: 0}
	d.Limits[uapi.RsrcAC] = uapi.Limits{Max: 1, Res: 1}
	d.Limits[uapi.RsrcEQ] = uapi.Limits{Max: 1 + ethRSSQueues + 2*ethTXQueues, Res: 1}
	d.Limits[uapi.RsrcPTE] = uapi.Limits{Max: 1 + ethRSSQueues, Res: 8}
	d.Limits[uapi.RsrcTXQ] = uapi.Limits{Max: 2 * ethTXQueues, Res: 1}
	d.Limits[uapi.RsrcTGQ] = uapi.Limits{Max: 2 + ethRSSQueues, Res: 1}
	d.Limits[uapi.RsrcLE] = uapi.Limits{Max: ethMaxLEs, Res: ethReservedLEs}
	id, _, errno := st.alloc(d, "ethernet-svc")
	if errno != 0 {
		return
	}
	st.find(id).LNIs = 1 // cxi_lni_alloc(dev->svc_id)
}

func (st *state) find(id uint32) *service {
	i, ok := slices.BinarySearchFunc(st.Services, id, func(s *service, id uint32) int {
		return int(int64(s.Desc.SvcID) - int64(id))
	})
	if !ok {
		return nil
	}
	return st.Services[i]
}

// nextID is the lowest free rgroup ID (xa_alloc from CXI_DEFAULT_SVC_ID).
func (st *state) nextID() uint32 {
	id := uint32(uapi.DefaultSvcID)
	for _, s := range st.Services {
		if s.Desc.SvcID != id {
			break
		}
		id++
	}
	return id
}

// shared is how many of a resource no service has reserved.
func (st *state) shared(t uapi.RsrcType) uint16 {
	var reserved int
	for _, s := range st.Services {
		if e := s.Rsrc[t]; e != nil {
			reserved += int(e.Res)
		}
	}
	return uint16(max(int(st.Max[t])-reserved, 0))
}

// freePool returns the lowest pool ID in [lo, n) that no service holds.
func (st *state) freePool(lo, n int, held func(*service) (int, bool)) (int, bool) {
	for id := lo; id < n; id++ {
		taken := false
		for _, s := range st.Services {
			if p, ok := held(s); ok && p == id {
				taken = true
				break
			}
		}
		if !taken {
			return id, true
		}
	}
	return 0, false
}

func (st *state) rmuUsed() int {
	n := 0
	for _, s := range st.Services {
		n += s.RMU
	}
	return n
}

// validate is validate_descriptor.
func (st *state) validate(d *uapi.SvcDesc) syscall.Errno {
	if d.RestrictedVNIs {
		if d.NumVldVNIs > uapi.MaxVNIs {
			return syscall.EINVAL
		}
		for _, v := range d.VNIs[:d.NumVldVNIs] {
			if v == 0 { // is_vni_valid: nonzero, 16 bits
				return syscall.EINVAL
			}
		}
	}
	if d.RestrictedMembers {
		for _, m := range d.Members {
			if m.Type >= uapi.MemberMax {
				return syscall.EINVAL
			}
		}
	}
	if d.ResourceLimits {
		for t, l := range d.Limits {
			if l.Max < l.Res || l.Max > st.Max[t] {
				return syscall.EINVAL
			}
		}
	}
	return 0
}

// buildACL is alloc_rgroup_ac_entries. Like the driver it keeps one
// cxi_ac_data union across the members, so a NET_NS member in a descriptor
// admits the namespace whose inode equals the previous member's ID (0 if
// none); netns members are meant to be added with SVC_SET_NETNS.
func buildACL(d *uapi.SvcDesc) (acl, syscall.Errno) {
	if !d.RestrictedMembers {
		return acl{Open: true}, 0
	}
	var a acl
	var data uint32
	for _, m := range d.Members {
		var set *[]uint32
		switch m.Type {
		case uapi.MemberUID:
			data, set = m.ID, &a.UIDs
		case uapi.MemberGID:
			data, set = m.ID, &a.GIDs
		case uapi.MemberNetNS:
			set = &a.NetNS
		default:
			continue
		}
		if data == invalidACData {
			return acl{}, syscall.EBADR
		}
		if slices.Contains(*set, data) {
			return acl{}, syscall.EEXIST
		}
		*set = append(*set, data)
	}
	slices.Sort(a.NetNS)
	return a, 0
}

// vniAttr is a TX/RX profile's VNI match (struct cxi_rxtx_vni_attr): the
// VNIs v with v&^Ignore == Match&^Ignore. A restricted VNI is Ignore 0;
// the range [min, min+2^k-1] is Match min, Ignore 2^k-1.
type vniAttr struct {
	Match  uint16 `json:"match"`
	Ignore uint16 `json:"ignore"`
}

// overlaps is vni_overlap: some VNI satisfies both.
func (a vniAttr) overlaps(b vniAttr) bool {
	ignore := a.Ignore | b.Ignore
	return a.Match&^ignore == b.Match&^ignore
}

// profiles returns the VNI attributes of the service's TX/RX profiles.
func (s *service) profiles() []vniAttr {
	if s.Range != nil {
		return []vniAttr{*s.Range}
	}
	out := make([]vniAttr, 0, s.Profiles)
	for _, v := range s.Desc.VNIs[:min(s.Profiles, uapi.MaxVNIs)] {
		out = append(out, vniAttr{Match: v})
	}
	return out
}

// checkUnique is vni_overlap_test over the device's profile list, which
// cxi_dev_alloc_tx_profile and _rx_profile run for every new profile: it
// refuses (EEXIST) a profile that overlaps an existing one unless both are
// exact VNIs (ignore 0), so services may share a VNI (a WLM job VNI) but
// no range may overlap anything. Every service's profiles count, enabled
// or not, the default service's VNIs 1 and 10 included; profiles with VNI
// 0 (configfs placeholders) do not.
func (st *state) checkUnique(a vniAttr) syscall.Errno {
	for _, s := range st.Services {
		for _, p := range s.profiles() {
			if p.Match != 0 && p.overlaps(a) && (p.Ignore != 0 || a.Ignore != 0) {
				return syscall.EEXIST
			}
		}
	}
	return 0
}

// alloc is cxi_svc_alloc: the new service's ID, or the errno and the fail
// info the driver copies back with it.
func (st *state) alloc(desc uapi.SvcDesc, name string) (uint32, uapi.FailInfo, syscall.Errno) {
	var fail uapi.FailInfo
	if errno := st.validate(&desc); errno != 0 {
		return 0, fail, errno
	}
	svc := &service{Desc: desc, Name: name, LNIsPerRGID: defaultLNIsPerRG}
	svc.Desc.SvcID = st.nextID()
	if desc.IsSystemSvc {
		svc.LNIsPerRGID = 1
	}
	a, errno := buildACL(&desc)
	if errno != 0 {
		return 0, fail, errno
	}
	svc.ACL = a
	if desc.RestrictedVNIs { // alloc_rxtx_profiles, before the resources
		for _, v := range desc.VNIs[:desc.NumVldVNIs] {
			if errno := st.checkUnique(vniAttr{Match: v}); errno != 0 {
				return 0, fail, errno
			}
		}
		svc.Profiles = int(desc.NumVldVNIs)
	}
	if errno := st.reserve(svc, &fail); errno != 0 {
		return 0, fail, errno
	}
	if (svc.Desc.SvcID == uapi.DefaultSvcID && st.DefaultDisabled) || !desc.RestrictedVNIs {
		svc.Desc.Enable = false
	} else if errno := st.enable(svc, true); errno != 0 {
		return 0, fail, errno
	}
	i, _ := slices.BinarySearchFunc(st.Services, svc.Desc.SvcID, func(s *service, id uint32) int {
		return int(int64(s.Desc.SvcID) - int64(id))
	})
	st.Services = slices.Insert(st.Services, i, svc)
	return svc.Desc.SvcID, fail, 0
}

// reserve is reserve_rsrcs followed by cass_rgroup_add_resource for each
// resource. It changes nothing in st; the entries and pools it picks are
// recorded in svc, which becomes part of st only when alloc succeeds.
func (st *state) reserve(svc *service, fail *uapi.FailInfo) syscall.Errno {
	limits := &svc.Desc.Limits
	if !svc.Desc.ResourceLimits {
		for t := range limits {
			limits[t] = uapi.Limits{Max: st.Max[t]}
		}
	}
	// Check that every reservation fits, filling in what is available.
	for t := range uapi.NumRsrcTypes {
		l := &limits[t]
		if l.Res == 0 && l.Max == 0 {
			continue
		}
		if t == uapi.RsrcTLE {
			if svc.Desc.SvcID != uapi.DefaultSvcID {
				l.Res = max(l.Res, minPoolTLEs)
				l.Max = l.Res
			}
			continue
		}
		avail := st.shared(t)
		fail.RsrcAvail[t] = avail
		if l.Res > avail {
			return syscall.ENOSPC
		}
	}
	// Add the resource entries, taking pools where needed.
	for t := range uapi.NumRsrcTypes {
		l := limits[t]
		if l.Res == 0 && l.Max == 0 {
			continue
		}
		if t == uapi.RsrcLE && l.Res == 0 {
			continue // shares LE pool 0
		}
		if t == uapi.RsrcTLE && ((l.Res != 0 && l.Res < minPoolTLEs) || l.Max != l.Res) {
			return syscall.EINVAL
		}
		if l.Res > st.shared(t) || l.Max > st.Max[t] {
			return syscall.ENOSPC
		}
		switch t {
		case uapi.RsrcLE:
			pool, ok := st.freePool(1, numLEPools, func(s *service) (int, bool) { return s.LEPool, s.LEPool > 0 })
			if !ok {
				fail.NoLEPools = true
				return syscall.ENOSPC
			}
			svc.LEPool = pool
		case uapi.RsrcTLE:
			pool, ok := st.freePool(0, numTLEPools, func(s *service) (int, bool) { return s.TLEPool, s.OwnsTLEPool })
			if !ok {
				fail.NoTLEPools = true
				return syscall.ENOSPC
			}
			svc.TLEPool, svc.OwnsTLEPool = pool, true
		}
		svc.Rsrc[t] = &uapi.Limits{Max: l.Max, Res: l.Res}
	}
	return 0
}

// enable is svc_enable: enabling enables each VNI's TX and RX profile, and
// an RX profile needs one of the RMU VNI-list entries; any failure leaves
// the service disabled. svc may not be in st yet.
func (st *state) enable(svc *service, on bool) syscall.Errno {
	if on {
		svc.Desc.Enable = true
		others := st.rmuUsed()
		if slices.Contains(st.Services, svc) {
			others -= svc.RMU
		}
		var errno syscall.Errno
		for i := range int(svc.Desc.NumVldVNIs) {
			if i >= svc.Profiles {
				errno = syscall.EINVAL // no profile: cxi_tx_profile_enable(NULL)
				break
			}
			if i < svc.RMU {
				continue // already enabled
			}
			if others+svc.RMU >= numRMUEntries {
				errno = syscall.ENOSPC
				break
			}
			svc.RMU++
		}
		if errno == 0 {
			return 0
		}
		svc.Desc.Enable, svc.RMU = false, 0
		return errno
	}
	svc.Desc.Enable, svc.RMU = false, 0
	return 0
}

// destroy is cxi_svc_destroy.
func (st *state) destroy(id uint32) syscall.Errno {
	if id == uapi.DefaultSvcID {
		return syscall.EINVAL
	}
	svc := st.find(id)
	if svc == nil {
		return syscall.EINVAL
	}
	if svc.LNIs > 0 {
		return syscall.EBUSY
	}
	st.Services = slices.DeleteFunc(st.Services, func(s *service) bool { return s == svc })
	return 0
}

// setEnable is cxi_svc_enable.
func (st *state) setEnable(id uint32, on bool) syscall.Errno {
	svc := st.find(id)
	if svc == nil {
		return syscall.EINVAL
	}
	if svc.LNIs > 0 {
		return syscall.EBUSY
	}
	return st.enable(svc, on)
}

// setNetns is cxi_svc_set_netns. changed reports that the namespace was
// added to the rgroup, which survives an ENODATA from the profiles.
func (st *state) setNetns(id, netns uint32) (changed bool, errno syscall.Errno) {
	svc := st.find(id)
	if svc == nil {
		return false, syscall.EINVAL
	}
	if len(svc.ACL.UIDs) > 0 || len(svc.ACL.GIDs) > 0 || svc.ACL.Open {
		return false, syscall.EEXIST
	}
	if svc.Desc.Enable { // cxi_rgroup_update_ac_entry on an enabled rgroup
		return false, syscall.EBUSY
	}
	if netns == invalidACData {
		return false, syscall.EBADR
	}
	i, found := slices.BinarySearch(svc.ACL.NetNS, netns)
	if found {
		return false, syscall.EEXIST
	}
	svc.ACL.NetNS = slices.Insert(svc.ACL.NetNS, i, netns)
	// update_profile_netns_entries: every valid VNI needs its profiles.
	if int(svc.Desc.NumVldVNIs) > svc.Profiles {
		return true, syscall.ENODATA
	}
	return true, 0
}

// setVNIRange is cxi_svc_set_vni_range. changed reports that the service
// was changed, which happens even when the profile is refused: the driver
// sets num_vld_vnis to 1 first, so the service cannot be enabled until a
// range is accepted.
//
// The driver allocates a new profile on every call and overwrites its
// pointer to the last one; the simulation replaces the range instead (a
// second call is not a use the driver supports).
func (st *state) setVNIRange(id, vniMin, vniMax uint32) (changed bool, errno syscall.Errno) {
	svc := st.find(id)
	if svc == nil || svc.Desc.RestrictedVNIs || !validVNI(vniMin) || !validVNI(vniMax) || vniMax < vniMin {
		return false, syscall.EINVAL
	}
	n := vniMax - vniMin + 1
	if n&(n-1) != 0 || vniMin&(n-1) != 0 { // a power of two, aligned
		return false, syscall.EINVAL
	}
	svc.Desc.NumVldVNIs = 1
	attr := vniAttr{Match: uint16(vniMin), Ignore: uint16(n - 1)}
	if errno := st.checkUnique(attr); errno != 0 {
		svc.Profiles, svc.Range = 0, nil
		return true, errno
	}
	svc.Profiles, svc.Range = 1, &attr
	return true, 0
}

// validVNI is is_vni_valid: nonzero, 16 bits.
func validVNI(v uint32) bool { return v != 0 && v <= 0xffff }

// getVNIRange is cxi_svc_get_vni_range.
func (st *state) getVNIRange(id uint32) (vniMin, vniMax uint32, errno syscall.Errno) {
	svc := st.find(id)
	switch {
	case svc == nil || svc.Desc.RestrictedVNIs || svc.Desc.NumVldVNIs == 0:
		return 0, 0, syscall.EINVAL
	case svc.Range == nil: // setting the range failed: no TX profile
		return 0, 0, syscall.ENOENT
	}
	r := *svc.Range
	return uint32(r.Match), uint32(r.Match) + uint32(r.Ignore), 0
}

// getNetns is cxi_svc_get_netns: the lowest netns inode of the service.
func (st *state) getNetns(id uint32) (uint32, syscall.Errno) {
	svc := st.find(id)
	if svc == nil || len(svc.ACL.NetNS) == 0 {
		return 0, syscall.EINVAL
	}
	return svc.ACL.NetNS[0], 0
}

// setInUse records LNIs using a service; cxi_lni_alloc refuses a disabled
// service with EKEYREVOKED.
func (st *state) setInUse(id uint32, lnis int) syscall.Errno {
	svc := st.find(id)
	if svc == nil || lnis < 0 {
		return syscall.EINVAL
	}
	if lnis > 0 && !svc.Desc.Enable {
		return syscall.EKEYREVOKED
	}
	svc.LNIs = lnis
	return 0
}
