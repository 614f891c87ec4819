package sim

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// serviceRecord is the stored form of a service. The descriptor is the hex
// of its 68-byte wire image: compact (the state is re-read on every
// command) and decoded by the uapi code itself.
type serviceRecord struct {
	Desc        string      `json:"desc"`
	Name        string      `json:"name"`
	LNIs        int         `json:"lnis,omitempty"`
	LNIsPerRGID int         `json:"lnis_per_rgid"`
	ACL         acl         `json:"acl"`
	Rsrc        [][3]uint16 `json:"rsrc,omitempty"` // {type, max, res} of each entry
	LEPool      int         `json:"le_pool,omitempty"`
	TLEPool     int         `json:"tle_pool,omitempty"`
	OwnsTLEPool bool        `json:"owns_tle_pool,omitempty"`
	Profiles    int         `json:"profiles,omitempty"`
	Range       *vniAttr    `json:"range,omitempty"`
	RMU         int         `json:"rmu,omitempty"`
}

// MarshalJSON encodes the service as a serviceRecord. It appends the JSON
// by hand: the whole state is written after every change, and reflection
// made that the simulation's main cost.
func (s *service) MarshalJSON() ([]byte, error) {
	return s.appendJSON(nil)
}

func (s *service) appendJSON(b []byte) ([]byte, error) {
	desc, err := s.Desc.MarshalBinary()
	if err != nil {
		return nil, err
	}
	name, err := json.Marshal(s.Name)
	if err != nil {
		return nil, err
	}
	b = append(b, `{"desc":"`...)
	b = hex.AppendEncode(b, desc)
	b = append(b, `","name":`...)
	b = append(b, name...)
	b = appendInt(b, "lnis", s.LNIs)
	b = appendInt(b, "lnis_per_rgid", s.LNIsPerRGID)
	b = append(b, `,"acl":{"open":`...)
	b = strconv.AppendBool(b, s.ACL.Open)
	b = appendIDs(b, "uids", s.ACL.UIDs)
	b = appendIDs(b, "gids", s.ACL.GIDs)
	b = appendIDs(b, "netns", s.ACL.NetNS)
	b = append(b, `},"rsrc":[`...)
	first := true
	for t, e := range s.Rsrc {
		if e == nil {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = fmt.Appendf(b, "[%d,%d,%d]", t, e.Max, e.Res)
	}
	b = append(b, ']')
	b = appendInt(b, "le_pool", s.LEPool)
	b = appendInt(b, "tle_pool", s.TLEPool)
	b = append(b, `,"owns_tle_pool":`...)
	b = strconv.AppendBool(b, s.OwnsTLEPool)
	b = appendInt(b, "profiles", s.Profiles)
	if r := s.Range; r != nil {
		b = fmt.Appendf(b, `,"range":{"match":%d,"ignore":%d}`, r.Match, r.Ignore)
	}
	b = appendInt(b, "rmu", s.RMU)
	return append(b, '}'), nil
}

func appendInt(b []byte, key string, v int) []byte {
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	return strconv.AppendInt(b, int64(v), 10)
}

func appendIDs(b []byte, key string, ids []uint32) []byte {
	if len(ids) == 0 {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, ']')
}

// encodeState is json.Marshal(st) without the reflection.
func encodeState(st *state) ([]byte, error) {
	b := fmt.Appendf(nil, `{"version":%d,"max":[`, st.Version)
	for i, m := range st.Max {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(m), 10)
	}
	b = append(b, `],"default_disabled":`...)
	b = strconv.AppendBool(b, st.DefaultDisabled)
	b = append(b, `,"services":[`...)
	for i, s := range st.Services {
		if i > 0 {
			b = append(b, ",\n"...)
		}
		var err error
		if b, err = s.appendJSON(b); err != nil {
			return nil, err
		}
	}
	b = append(b, ']')
	if len(st.Faults) > 0 {
		faults, err := json.Marshal(st.Faults)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"faults":`...)
		b = append(b, faults...)
	}
	return append(b, "}\n"...), nil
}

// UnmarshalJSON decodes a serviceRecord.
func (s *service) UnmarshalJSON(b []byte) error {
	var r serviceRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	raw, err := hex.DecodeString(r.Desc)
	if err != nil {
		return fmt.Errorf("service descriptor: %w", err)
	}
	*s = service{
		Name: r.Name, LNIs: r.LNIs, LNIsPerRGID: r.LNIsPerRGID, ACL: r.ACL, LEPool: r.LEPool,
		TLEPool: r.TLEPool, OwnsTLEPool: r.OwnsTLEPool, Profiles: r.Profiles, Range: r.Range, RMU: r.RMU,
	}
	for _, ids := range []*[]uint32{&s.ACL.UIDs, &s.ACL.GIDs, &s.ACL.NetNS} {
		if len(*ids) == 0 {
			*ids = nil // one form for "none"
		}
	}
	if err := s.Desc.UnmarshalBinary(raw); err != nil {
		return err
	}
	for _, e := range r.Rsrc {
		if e[0] >= uint16(uapi.NumRsrcTypes) {
			return fmt.Errorf("service %d: resource type %d", s.Desc.SvcID, e[0])
		}
		s.Rsrc[e[0]] = &uapi.Limits{Max: e[1], Res: e[2]}
	}
	return nil
}

// check verifies what the simulation relies on in a state it did not
// write itself: services in increasing ID order, the default service
// first, pools and RMU entries within the hardware's numbers.
func (st *state) check() error {
	if len(st.Services) == 0 || st.Services[0].Desc.SvcID != uapi.DefaultSvcID {
		return errors.New("no default service")
	}
	tlePools, lePools := map[int]bool{}, map[int]bool{}
	rmu := 0
	for i, s := range st.Services {
		if i > 0 && s.Desc.SvcID <= st.Services[i-1].Desc.SvcID {
			return fmt.Errorf("service %d listed after %d", s.Desc.SvcID, st.Services[i-1].Desc.SvcID)
		}
		if s.LNIs < 0 || s.Profiles < 0 || s.Profiles > uapi.MaxVNIs || s.RMU < 0 || s.RMU > s.Profiles {
			return fmt.Errorf("service %d: bad counts", s.Desc.SvcID)
		}
		if r := s.Range; r != nil && (s.Desc.RestrictedVNIs || s.Profiles != 1 || r.Ignore&(r.Ignore+1) != 0 || r.Match&r.Ignore != 0) {
			return fmt.Errorf("service %d: bad VNI range", s.Desc.SvcID)
		}
		rmu += s.RMU
		if s.OwnsTLEPool {
			if s.TLEPool < 0 || s.TLEPool >= numTLEPools || tlePools[s.TLEPool] {
				return fmt.Errorf("service %d: TLE pool %d", s.Desc.SvcID, s.TLEPool)
			}
			tlePools[s.TLEPool] = true
		}
		if s.LEPool != 0 {
			if s.LEPool < 0 || s.LEPool >= numLEPools || lePools[s.LEPool] {
				return fmt.Errorf("service %d: LE pool %d", s.Desc.SvcID, s.LEPool)
			}
			lePools[s.LEPool] = true
		}
	}
	for _, f := range st.Faults {
		if err := f.validate(); err != nil {
			return err
		}
	}
	if rmu > numRMUEntries {
		return fmt.Errorf("%d RMU entries in use", rmu)
	}
	for t := range uapi.NumRsrcTypes {
		reserved := 0
		for _, s := range st.Services {
			if e := s.Rsrc[t]; e != nil {
				reserved += int(e.Res)
			}
		}
		if reserved > int(st.Max[t]) {
			return fmt.Errorf("%s: %d reserved of %d", t, reserved, st.Max[t])
		}
	}
	return nil
}

// clone returns a deep copy of st.
func (st *state) clone() *state {
	c := *st
	c.Services = make([]*service, len(st.Services))
	for i, s := range st.Services {
		c.Services[i] = s.clone()
	}
	c.Faults = slices.Clone(st.Faults)
	return &c
}

func (s *service) clone() *service {
	c := *s
	c.ACL.UIDs = slices.Clone(s.ACL.UIDs)
	c.ACL.GIDs = slices.Clone(s.ACL.GIDs)
	c.ACL.NetNS = slices.Clone(s.ACL.NetNS)
	if s.Range != nil {
		r := *s.Range
		c.Range = &r
	}
	for t, e := range s.Rsrc {
		if e != nil {
			l := *e
			c.Rsrc[t] = &l
		}
	}
	return &c
}
