package uapi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// le is the byte order of every field: the driver's ABI is the host's, and
// the project targets x86_64.
var le = binary.LittleEndian

// ErrSize reports a buffer whose length is not the exact size of the
// structure being decoded.
var ErrSize = errors.New("wrong size")

// ErrOp reports a command whose op code is not the one being decoded.
var ErrOp = errors.New("unexpected op code")

// ErrRange reports a field value that the wire format cannot represent,
// such as a counter pool ID above 3 (a 2-bit field).
var ErrRange = errors.New("value out of range")

// Driver-wide constants of cxi-abi.h.
const (
	// MaxVNIs is CXI_SVC_MAX_VNIS, the VNIs one service may restrict to.
	MaxVNIs = 4
	// MaxMembers is CXI_SVC_MAX_MEMBERS, the uid/gid members of a descriptor.
	MaxMembers = 2
	// DefaultSvcID is CXI_DEFAULT_SVC_ID, the driver's default service.
	DefaultSvcID = 1
	// MaxReqSize is the largest command the driver accepts (MAX_REQ_SIZE).
	MaxReqSize = 22432
)

// MemberType is enum cxi_svc_member_type.
type MemberType uint32

// Member types of a service descriptor.
const (
	MemberIgnore MemberType = iota // CXI_SVC_MEMBER_IGNORE: an unused slot
	MemberUID                      // CXI_SVC_MEMBER_UID
	MemberGID                      // CXI_SVC_MEMBER_GID
	MemberNetNS                    // CXI_SVC_MEMBER_NET_NS
	MemberMax                      // CXI_SVC_MEMBER_MAX: first invalid value
)

// String returns the lower-case name the cxi_service tool uses.
func (t MemberType) String() string {
	switch t {
	case MemberIgnore:
		return "ignore"
	case MemberUID:
		return "uid"
	case MemberGID:
		return "gid"
	case MemberNetNS:
		return "netns"
	}
	return fmt.Sprintf("member(%d)", uint32(t))
}

// TC is enum cxi_traffic_class, the index into [SvcDesc.TCs].
type TC int

// Traffic classes of a service descriptor.
const (
	TCDedicatedAccess TC = iota // CXI_TC_DEDICATED_ACCESS
	TCLowLatency                // CXI_TC_LOW_LATENCY
	TCBulkData                  // CXI_TC_BULK_DATA
	TCBestEffort                // CXI_TC_BEST_EFFORT
	TCEth                       // CXI_TC_ETH
	NumTCs                      // CXI_TC_MAX
)

var tcNames = [NumTCs]string{"DEDICATED_ACCESS", "LOW_LATENCY", "BULK_DATA", "BEST_EFFORT", "ETH"}

// String returns the driver's name of the class, e.g. "LOW_LATENCY".
func (t TC) String() string {
	if t >= 0 && t < NumTCs {
		return tcNames[t]
	}
	return fmt.Sprintf("TC(%d)", int(t))
}

// RsrcType is enum cxi_rsrc_type, the index into [RsrcLimits].
type RsrcType int

// Resource types a service can limit and reserve.
const (
	RsrcPTE      RsrcType = iota // portal table entries
	RsrcTXQ                      // transmit command queues
	RsrcTGQ                      // target command queues
	RsrcEQ                       // event queues
	RsrcCT                       // counters
	RsrcLE                       // list entries (per processing engine)
	RsrcTLE                      // trigger list entries
	RsrcAC                       // address contexts
	NumRsrcTypes                 // CXI_RSRC_TYPE_MAX
)

var rsrcNames = [NumRsrcTypes]string{"PTEs", "TXQs", "TGQs", "EQs", "CTs", "LEs", "TLEs", "ACs"}

// String returns the driver's name of the type, e.g. "TLEs".
func (t RsrcType) String() string {
	if t >= 0 && t < NumRsrcTypes {
		return rsrcNames[t]
	}
	return fmt.Sprintf("RsrcType(%d)", int(t))
}

// Limits is struct cxi_limits: the most of one resource a service may use
// and how many of them it reserves.
type Limits struct {
	Max uint16 `json:"max"`
	Res uint16 `json:"res"`
}

// RsrcLimits is struct cxi_rsrc_limits, indexed by [RsrcType].
type RsrcLimits [NumRsrcTypes]Limits

// SvcMember is one entry of cxi_svc_desc.members: a uid or gid (the C
// union) and its type.
type SvcMember struct {
	Type MemberType `json:"type"`
	ID   uint32     `json:"id"`
}

// Sizes and offsets of the descriptor types, as the C compiler lays them out.
const (
	SvcDescSize   = 68
	FailInfoSize  = 20
	RsrcLimitsLen = 32

	offFlags      = 0
	offNumVldVNIs = 1
	offVNIs       = 2
	offTCs        = 10 // 5 bools; byte 15 is padding
	offMembers    = 16 // 2 × {uint32 id, uint32 type}
	offLimits     = 32
	offSvcID      = 64
)

// Bits of byte 0 of struct cxi_svc_desc. GCC on x86_64 allocates bit-fields
// from the least significant bit, in declaration order.
const (
	flagRestrictedMembers = 1 << 0
	flagRestrictedVNIs    = 1 << 1
	flagRestrictedTCs     = 1 << 2
	flagResourceLimits    = 1 << 3
	flagEnable            = 1 << 4
	flagIsSystemSvc       = 1 << 5
	cntrPoolShift         = 6 // cntr_pool_id:2 occupies bits 6-7
)

// SvcDesc is struct cxi_svc_desc (68 bytes), the description of a CXI
// service that SVC_ALLOC takes and SVC_GET and SVC_LIST_GET return.
type SvcDesc struct {
	RestrictedMembers bool `json:"restricted_members"`
	RestrictedVNIs    bool `json:"restricted_vnis"`
	RestrictedTCs     bool `json:"restricted_tcs"`
	ResourceLimits    bool `json:"resource_limits"`
	// Enable is ignored by SVC_ALLOC; SVC_GET reports the service's state.
	Enable      bool `json:"enable"`
	IsSystemSvc bool `json:"is_system_svc"`
	// CntrPoolID is a 2-bit field: 0 to 3.
	CntrPoolID uint8 `json:"cntr_pool_id"`
	// NumVldVNIs says how many of VNIs are valid.
	NumVldVNIs uint8                 `json:"num_vld_vnis"`
	VNIs       [MaxVNIs]uint16       `json:"vnis"`
	TCs        [NumTCs]bool          `json:"tcs"`
	Members    [MaxMembers]SvcMember `json:"members"`
	Limits     RsrcLimits            `json:"limits"`
	SvcID      uint32                `json:"svc_id"`
}

// ValidVNIs returns the first NumVldVNIs entries of VNIs (at most
// [MaxVNIs]).
func (d *SvcDesc) ValidVNIs() []uint16 {
	n := min(int(d.NumVldVNIs), MaxVNIs)
	return append([]uint16(nil), d.VNIs[:n]...)
}

// MarshalBinary returns the 68-byte wire image of d. It fails only when a
// field does not fit its C type (CntrPoolID above 3).
func (d SvcDesc) MarshalBinary() ([]byte, error) {
	return d.AppendBinary(make([]byte, 0, SvcDescSize))
}

// AppendBinary appends the 68-byte wire image of d to b.
func (d SvcDesc) AppendBinary(b []byte) ([]byte, error) {
	n := len(b)
	b = append(b, make([]byte, SvcDescSize)...)
	if err := d.encodeInto(b[n:]); err != nil {
		return b[:n], err
	}
	return b, nil
}

// encodeInto writes d into b, which has exactly SvcDescSize bytes,
// including the zero padding byte.
func (d *SvcDesc) encodeInto(b []byte) error {
	if d.CntrPoolID > 3 {
		return fmt.Errorf("svc_desc cntr_pool_id %d: %w (2-bit field)", d.CntrPoolID, ErrRange)
	}
	var flags byte
	for _, f := range []struct {
		set bool
		bit byte
	}{
		{d.RestrictedMembers, flagRestrictedMembers},
		{d.RestrictedVNIs, flagRestrictedVNIs},
		{d.RestrictedTCs, flagRestrictedTCs},
		{d.ResourceLimits, flagResourceLimits},
		{d.Enable, flagEnable},
		{d.IsSystemSvc, flagIsSystemSvc},
	} {
		if f.set {
			flags |= f.bit
		}
	}
	flags |= d.CntrPoolID << cntrPoolShift
	b[offFlags] = flags
	b[offNumVldVNIs] = d.NumVldVNIs
	for i, v := range d.VNIs {
		le.PutUint16(b[offVNIs+2*i:], v)
	}
	for i, tc := range d.TCs {
		b[offTCs+i] = boolByte(tc)
	}
	b[offTCs+int(NumTCs)] = 0 // padding
	for i, m := range d.Members {
		le.PutUint32(b[offMembers+8*i:], m.ID)
		le.PutUint32(b[offMembers+8*i+4:], uint32(m.Type))
	}
	d.Limits.put(b[offLimits : offLimits+RsrcLimitsLen])
	le.PutUint32(b[offSvcID:], d.SvcID)
	return nil
}

// UnmarshalBinary decodes a 68-byte wire image. Like the C code, it reads
// any nonzero bool byte as true and ignores the padding byte.
func (d *SvcDesc) UnmarshalBinary(b []byte) error {
	if len(b) != SvcDescSize {
		return fmt.Errorf("svc_desc: %w: %d bytes, want %d", ErrSize, len(b), SvcDescSize)
	}
	flags := b[offFlags]
	*d = SvcDesc{
		RestrictedMembers: flags&flagRestrictedMembers != 0,
		RestrictedVNIs:    flags&flagRestrictedVNIs != 0,
		RestrictedTCs:     flags&flagRestrictedTCs != 0,
		ResourceLimits:    flags&flagResourceLimits != 0,
		Enable:            flags&flagEnable != 0,
		IsSystemSvc:       flags&flagIsSystemSvc != 0,
		CntrPoolID:        flags >> cntrPoolShift,
		NumVldVNIs:        b[offNumVldVNIs],
		SvcID:             le.Uint32(b[offSvcID:]),
	}
	for i := range d.VNIs {
		d.VNIs[i] = le.Uint16(b[offVNIs+2*i:])
	}
	for i := range d.TCs {
		d.TCs[i] = b[offTCs+i] != 0
	}
	for i := range d.Members {
		d.Members[i] = SvcMember{
			ID:   le.Uint32(b[offMembers+8*i:]),
			Type: MemberType(le.Uint32(b[offMembers+8*i+4:])),
		}
	}
	d.Limits.get(b[offLimits : offLimits+RsrcLimitsLen])
	return nil
}

func (l *RsrcLimits) put(b []byte) {
	for i, x := range l {
		le.PutUint16(b[4*i:], x.Max)
		le.PutUint16(b[4*i+2:], x.Res)
	}
}

func (l *RsrcLimits) get(b []byte) {
	for i := range l {
		l[i] = Limits{Max: le.Uint16(b[4*i:]), Res: le.Uint16(b[4*i+2:])}
	}
}

// MarshalBinary returns the 32-byte wire image of struct cxi_rsrc_limits.
func (l RsrcLimits) MarshalBinary() ([]byte, error) {
	b := make([]byte, RsrcLimitsLen)
	l.put(b)
	return b, nil
}

// UnmarshalBinary decodes a 32-byte struct cxi_rsrc_limits.
func (l *RsrcLimits) UnmarshalBinary(b []byte) error {
	if len(b) != RsrcLimitsLen {
		return fmt.Errorf("rsrc_limits: %w: %d bytes, want %d", ErrSize, len(b), RsrcLimitsLen)
	}
	l.get(b)
	return nil
}

// FailInfo is struct cxi_svc_fail_info (20 bytes): why SVC_ALLOC failed
// with ENOSPC.
type FailInfo struct {
	// RsrcAvail holds, for each resource type the request limited, how
	// many were still free to reserve.
	RsrcAvail [NumRsrcTypes]uint16 `json:"rsrc_avail"`
	// NoLEPools, NoTLEPools and NoCntrPools report that a pool of that
	// kind was needed and none was left.
	NoLEPools   bool `json:"no_le_pools"`
	NoTLEPools  bool `json:"no_tle_pools"`
	NoCntrPools bool `json:"no_cntr_pools"`
}

// IsZero reports whether f carries no information.
func (f FailInfo) IsZero() bool { return f == FailInfo{} }

// String summarises f for error messages, e.g.
// "no TLE pools; available: PTEs=2048 TXQs=1024".
func (f FailInfo) String() string {
	var s string
	add := func(part string) {
		if s != "" {
			s += "; "
		}
		s += part
	}
	if f.NoLEPools {
		add("no LE pools")
	}
	if f.NoTLEPools {
		add("no TLE pools")
	}
	if f.NoCntrPools {
		add("no counter pools")
	}
	var avail string
	for t, n := range f.RsrcAvail {
		if n != 0 {
			if avail != "" {
				avail += " "
			}
			avail += fmt.Sprintf("%s=%d", RsrcType(t), n)
		}
	}
	if avail != "" {
		add("available: " + avail)
	}
	if s == "" {
		return "no details"
	}
	return s
}

func (f *FailInfo) put(b []byte) {
	for i, n := range f.RsrcAvail {
		le.PutUint16(b[2*i:], n)
	}
	b[16] = boolByte(f.NoLEPools)
	b[17] = boolByte(f.NoTLEPools)
	b[18] = boolByte(f.NoCntrPools)
	b[19] = 0 // padding
}

// MarshalBinary returns the 20-byte wire image of f.
func (f FailInfo) MarshalBinary() ([]byte, error) {
	b := make([]byte, FailInfoSize)
	f.put(b)
	return b, nil
}

// UnmarshalBinary decodes a 20-byte struct cxi_svc_fail_info.
func (f *FailInfo) UnmarshalBinary(b []byte) error {
	if len(b) != FailInfoSize {
		return fmt.Errorf("svc_fail_info: %w: %d bytes, want %d", ErrSize, len(b), FailInfoSize)
	}
	f.get(b)
	return nil
}

func (f *FailInfo) get(b []byte) {
	for i := range f.RsrcAvail {
		f.RsrcAvail[i] = le.Uint16(b[2*i:])
	}
	f.NoLEPools = b[16] != 0
	f.NoTLEPools = b[17] != 0
	f.NoCntrPools = b[18] != 0
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}
