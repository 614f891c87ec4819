package cxi

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// DefaultServiceID is the ID of the driver's default service, which cannot
// be destroyed.
const DefaultServiceID = uapi.DefaultSvcID

// Limits of a service descriptor.
const (
	// MaxVNIs is how many VNIs one service may be restricted to.
	MaxVNIs = uapi.MaxVNIs
	// MaxIDMembers is how many uid/gid members one service may have.
	MaxIDMembers = uapi.MaxMembers
)

// invalidID is (uid_t)-1, which the driver refuses as a member (EBADR).
const invalidID = 0xffffffff

// MemberType says what a [Member] ID identifies.
type MemberType int

// Member types.
const (
	// MemberUID admits processes whose effective uid is ID.
	MemberUID MemberType = iota + 1
	// MemberGID admits processes whose effective gid is ID (supplementary
	// groups do not count).
	MemberGID
	// MemberNetNS admits processes in the network namespace whose inode
	// number is ID (as in /proc/PID/ns/net).
	MemberNetNS
)

// String returns "uid", "gid" or "netns".
func (t MemberType) String() string {
	switch t {
	case MemberUID:
		return "uid"
	case MemberGID:
		return "gid"
	case MemberNetNS:
		return "netns"
	}
	return fmt.Sprintf("MemberType(%d)", int(t))
}

// Member is one identity a service admits.
type Member struct {
	Type MemberType
	ID   uint32
}

// String returns the member as cxi_service prints it, e.g. "uid=1000".
func (m Member) String() string { return fmt.Sprintf("%s=%d", m.Type, m.ID) }

// TrafficClasses is a set of traffic classes as a bitmask, with the bit
// values of Slurm's SwitchParameters tcs= and the SLINGSHOT_TCS variable.
type TrafficClasses uint8

// Traffic classes a service may use.
const (
	TCDedicatedAccess TrafficClasses = 1 << iota // 0x1, DEDICATED_ACCESS
	TCLowLatency                                 // 0x2, LOW_LATENCY
	TCBulkData                                   // 0x4, BULK_DATA
	TCBestEffort                                 // 0x8, BEST_EFFORT

	// AllTrafficClasses holds the four user traffic classes.
	AllTrafficClasses = TCDedicatedAccess | TCLowLatency | TCBulkData | TCBestEffort
	// DefaultTrafficClasses is Slurm's default, LOW_LATENCY|BEST_EFFORT (0xa).
	DefaultTrafficClasses = TCLowLatency | TCBestEffort
)

var tcNames = []struct {
	tc   TrafficClasses
	name string
}{
	{TCDedicatedAccess, "DEDICATED_ACCESS"},
	{TCLowLatency, "LOW_LATENCY"},
	{TCBulkData, "BULK_DATA"},
	{TCBestEffort, "BEST_EFFORT"},
}

// String returns the set in SLINGSHOT_TCS form, e.g. "0xa".
func (t TrafficClasses) String() string { return fmt.Sprintf("0x%x", uint8(t)) }

// Names returns the driver's names of the classes in the set, e.g.
// ["LOW_LATENCY" "BEST_EFFORT"].
func (t TrafficClasses) Names() []string {
	var names []string
	for _, n := range tcNames {
		if t&n.tc != 0 {
			names = append(names, n.name)
		}
	}
	return names
}

// ParseTrafficClasses parses a set of traffic classes: a number ("0xa",
// "10") as in SLINGSHOT_TCS, or class names separated by ':', ',' or '|'
// as in Slurm's tcs= ("LOW_LATENCY:BEST_EFFORT"; case does not matter).
// The set must be non-empty and hold only the four user classes; errors
// wrap [ErrInvalidSpec].
func ParseTrafficClasses(s string) (TrafficClasses, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("%w: empty traffic class set", ErrInvalidSpec)
	}
	if s[0] >= '0' && s[0] <= '9' {
		v, err := strconv.ParseUint(s, 0, 8)
		if err != nil {
			return 0, fmt.Errorf("%w: traffic classes %q: not a number below 0x100", ErrInvalidSpec, s)
		}
		tcs := TrafficClasses(v)
		if tcs == 0 || tcs&^AllTrafficClasses != 0 {
			return 0, fmt.Errorf("%w: traffic classes %s: want a non-empty subset of 0xf", ErrInvalidSpec, tcs)
		}
		return tcs, nil
	}
	var tcs TrafficClasses
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ':' || r == ',' || r == '|' }) {
		name := strings.ToUpper(strings.TrimSpace(f))
		i := slices.IndexFunc(tcNames, func(n struct {
			tc   TrafficClasses
			name string
		}) bool {
			return n.name == name
		})
		if i < 0 {
			return 0, fmt.Errorf("%w: unknown traffic class %q", ErrInvalidSpec, f)
		}
		tcs |= tcNames[i].tc
	}
	if tcs == 0 {
		return 0, fmt.Errorf("%w: empty traffic class set %q", ErrInvalidSpec, s)
	}
	return tcs, nil
}

// Limit is the most of one resource a service may use (Max) and how many
// it reserves for itself (Res).
type Limit struct {
	Max uint16
	Res uint16
}

// Limits are a service's resource limits, per resource type.
type Limits struct {
	PTEs, TXQs, TGQs, EQs, CTs, LEs, TLEs, ACs Limit
}

// DefaultLimits returns limits that reserve nothing: each maximum is the
// Cassini device maximum (PTEs 2048, TXQs 1024, TGQs 512, EQs 2047, CTs
// 2047, LEs 16384, ACs 1022) and no resource has a reservation, TLEs not
// even a maximum.
//
// Why: a NIC has only 4 TLE pools, one held by the default service, and
// the driver gives every service that asks for any TLEs a pool of its own
// (at least 8 TLEs, max = res); it has 15 LE pools for services that
// reserve LEs. Reserving would cap a NIC at 3 such services, and Slurm's
// defaults reserve both. With no reservation a service shares LE pool 0
// and the default service's TLE pool, and the only limit left on the
// number of pod services is the NIC's 256 RMU VNI-list entries (one per
// VNI of each enabled service), so hundreds fit. These are the Cassini
// defaults (default_rsrc_limits); a NIC may publish smaller maxima in
// sysfs, and the driver refuses limits above them with EINVAL, so a client
// given the NIC's own maxima with [WithDeviceMaxima] uses those instead.
func DefaultLimits() Limits {
	return Limits{
		PTEs: Limit{Max: 2048}, TXQs: Limit{Max: 1024}, TGQs: Limit{Max: 512}, EQs: Limit{Max: 2047},
		CTs: Limit{Max: 2047}, LEs: Limit{Max: 16384}, ACs: Limit{Max: 1022},
	}
}

// rsrc converts l to the descriptor's array form.
func (l Limits) rsrc() uapi.RsrcLimits {
	var r uapi.RsrcLimits
	for t, lim := range l.byType() {
		r[t] = uapi.Limits{Max: lim.Max, Res: lim.Res}
	}
	return r
}

func (l *Limits) byType() [uapi.NumRsrcTypes]*Limit {
	return [uapi.NumRsrcTypes]*Limit{
		uapi.RsrcPTE: &l.PTEs, uapi.RsrcTXQ: &l.TXQs, uapi.RsrcTGQ: &l.TGQs, uapi.RsrcEQ: &l.EQs,
		uapi.RsrcCT: &l.CTs, uapi.RsrcLE: &l.LEs, uapi.RsrcTLE: &l.TLEs, uapi.RsrcAC: &l.ACs,
	}
}

func limitsFrom(r uapi.RsrcLimits) Limits {
	var l Limits
	for t, lim := range l.byType() {
		*lim = Limit{Max: r[t].Max, Res: r[t].Res}
	}
	return l
}

// ServiceSpec is what a [Client] creates: a service restricted to VNIs,
// members and traffic classes, with resource limits.
type ServiceSpec struct {
	// VNIs are the VNIs the service may use, 1 to 4 of them, nonzero and
	// distinct; the first is the job's.
	VNIs []uint16
	// Members are the identities the service admits: one or two uid/gid
	// members, or exactly one netns member. A service with no members
	// would admit everyone, so it is refused.
	Members []Member
	// TCs are the traffic classes the service may use; not empty.
	TCs TrafficClasses
	// Limits are the resource limits; nil means the client's default
	// ([DefaultLimits] unless set with [WithDefaultLimits]).
	Limits *Limits
	// Fit, when set, fits Limits to the NIC and checks that they fit
	// before the driver is asked (reserve.go); Limits must be set.
	Fit *Fit
}

// Validate checks s against the driver's rules and the project's policy,
// returning an error wrapping [ErrInvalidSpec] that says what is wrong.
func (s ServiceSpec) Validate() error {
	if len(s.VNIs) == 0 || len(s.VNIs) > MaxVNIs {
		return fmt.Errorf("%w: %d VNIs, want 1 to %d", ErrInvalidSpec, len(s.VNIs), MaxVNIs)
	}
	for i, v := range s.VNIs {
		if v == 0 {
			return fmt.Errorf("%w: VNI 0 is invalid", ErrInvalidSpec)
		}
		if slices.Contains(s.VNIs[:i], v) {
			return fmt.Errorf("%w: VNI %d listed twice", ErrInvalidSpec, v)
		}
	}
	if err := validateMembers(s.Members); err != nil {
		return err
	}
	if s.TCs == 0 || s.TCs&^AllTrafficClasses != 0 {
		return fmt.Errorf("%w: traffic classes %s: want a non-empty subset of %s", ErrInvalidSpec, s.TCs, AllTrafficClasses)
	}
	if s.Fit != nil && s.Limits == nil {
		return fmt.Errorf("%w: fitting to the NIC needs limits", ErrInvalidSpec)
	}
	if s.Limits != nil {
		for t, l := range s.Limits.byType() {
			if l.Res > l.Max {
				return fmt.Errorf("%w: %s reserved %d above maximum %d", ErrInvalidSpec, uapi.RsrcType(t), l.Res, l.Max)
			}
		}
	}
	return nil
}

func validateMembers(members []Member) error {
	if len(members) == 0 {
		return fmt.Errorf("%w: no members (a service must not admit everyone)", ErrInvalidSpec)
	}
	for i, m := range members {
		switch m.Type {
		case MemberUID, MemberGID:
			if m.ID == invalidID {
				return fmt.Errorf("%w: %s is invalid", ErrInvalidSpec, m)
			}
		case MemberNetNS:
			if len(members) != 1 {
				return fmt.Errorf("%w: a netns member cannot be combined with other members", ErrInvalidSpec)
			}
			if m.ID == 0 || m.ID == invalidID {
				return fmt.Errorf("%w: %s is not a namespace inode", ErrInvalidSpec, m)
			}
		default:
			return fmt.Errorf("%w: member %d has unknown type %d", ErrInvalidSpec, i, int(m.Type))
		}
		if slices.Contains(members[:i], m) {
			return fmt.Errorf("%w: member %s listed twice", ErrInvalidSpec, m)
		}
	}
	if len(members) > MaxIDMembers {
		return fmt.Errorf("%w: %d members, want at most %d", ErrInvalidSpec, len(members), MaxIDMembers)
	}
	return nil
}

// netns returns the spec's netns member's inode, if it has one.
func (s ServiceSpec) netns() (uint32, bool) {
	if len(s.Members) == 1 && s.Members[0].Type == MemberNetNS {
		return s.Members[0].ID, true
	}
	return 0, false
}

// desc builds the SVC_ALLOC descriptor for a validated spec. A netns
// member is not part of it: it is added with SVC_SET_NETNS.
func (s ServiceSpec) desc(limits Limits) uapi.SvcDesc {
	d := uapi.SvcDesc{
		RestrictedMembers: true,
		RestrictedVNIs:    true,
		RestrictedTCs:     true,
		ResourceLimits:    true,
		Enable:            true,
		NumVldVNIs:        uint8(len(s.VNIs)),
		Limits:            limits.rsrc(),
	}
	copy(d.VNIs[:], s.VNIs)
	for i, n := range tcNames {
		d.TCs[i] = s.TCs&n.tc != 0
	}
	if _, ok := s.netns(); !ok {
		for i, m := range s.Members {
			t := uapi.MemberUID
			if m.Type == MemberGID {
				t = uapi.MemberGID
			}
			d.Members[i] = uapi.SvcMember{Type: t, ID: m.ID}
		}
	}
	return d
}

// Service is a service as the driver reports it.
type Service struct {
	ID uint32
	// Enabled reports whether processes may use the service now.
	Enabled bool
	// System reports a system service (is_system_svc).
	System bool
	// RestrictedVNIs reports that only VNIs may be used; when false the
	// service uses a VNI range or is not yet usable.
	RestrictedVNIs bool
	VNIs           []uint16
	// VNIRange is the range of a service with RestrictedVNIs false, as
	// SVC_SET_VNI_RANGE set it (another tool's: the agent makes none);
	// nil when there is none yet.
	VNIRange *VNIRange
	// RestrictedMembers reports that only Members are admitted; when
	// false anyone is.
	RestrictedMembers bool
	// Members are the uid/gid members of the descriptor and the network
	// namespace admitted with SVC_SET_NETNS.
	Members []Member
	// RestrictedTCs reports that only TCs may be used; TCs is
	// [AllTrafficClasses] when it is false.
	RestrictedTCs bool
	TCs           TrafficClasses
	// Limits are the resource limits as the driver stored them (it
	// raises and caps TLE reservations); nil when the service has none.
	Limits *Limits
}

// IsDefault reports whether s is the driver's default service.
func (s Service) IsDefault() bool { return s.ID == DefaultServiceID }

// VNIRange is the VNIs Min to Max, both included.
type VNIRange struct{ Min, Max uint16 }

// Contains reports whether v lies in r.
func (r VNIRange) Contains(v uint16) bool { return r.Min <= v && v <= r.Max }

func (r VNIRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// BlocksVNI reports whether the driver refuses (EEXIST) a new service
// that has v among its restricted VNIs because of s: every VNI is a TX/RX
// profile, and a new profile may share an exact VNI with another service's
// but overlap no range (vni_overlap_test).
func (s Service) BlocksVNI(v uint16) bool { return s.VNIRange != nil && s.VNIRange.Contains(v) }

// serviceFrom converts a descriptor; netns members are added by the caller.
func serviceFrom(d uapi.SvcDesc) Service {
	s := Service{
		ID:                d.SvcID,
		Enabled:           d.Enable,
		System:            d.IsSystemSvc,
		RestrictedVNIs:    d.RestrictedVNIs,
		RestrictedMembers: d.RestrictedMembers,
		RestrictedTCs:     d.RestrictedTCs,
		TCs:               AllTrafficClasses,
	}
	if d.RestrictedVNIs {
		s.VNIs = d.ValidVNIs()
	}
	if d.RestrictedMembers {
		for _, m := range d.Members {
			switch m.Type {
			case uapi.MemberUID:
				s.Members = append(s.Members, Member{Type: MemberUID, ID: m.ID})
			case uapi.MemberGID:
				s.Members = append(s.Members, Member{Type: MemberGID, ID: m.ID})
			}
		}
	}
	if d.RestrictedTCs {
		s.TCs = 0
		for i, n := range tcNames {
			if d.TCs[i] {
				s.TCs |= n.tc
			}
		}
	}
	if d.ResourceLimits {
		l := limitsFrom(d.Limits)
		s.Limits = &l
	}
	return s
}

// mayHaveNetns reports whether SVC_GET_NETNS is worth asking: the driver
// refuses SVC_SET_NETNS on services with uid, gid or open members, so only
// a NET_NS member in the descriptor itself could give those one.
func mayHaveNetns(d uapi.SvcDesc) bool {
	if !d.RestrictedMembers {
		return false
	}
	idMembers := false
	for _, m := range d.Members {
		switch m.Type {
		case uapi.MemberNetNS:
			return true
		case uapi.MemberUID, uapi.MemberGID:
			idMembers = true
		}
	}
	return !idMembers
}
