package checkpoint

import (
	"encoding/json"
	"fmt"
	"time"
)

// The formats of the file's data. Version 4 keeps the holders as they
// are; versions 1 to 3 kept the device plugin's pods and DRA's claims in
// two maps of two record types, which release 0.2.0 reads: [Store] writes
// version 3 unless told otherwise (see [Store.WriteFormat]), so that a
// rollback finds a file it can read.
const (
	// Version is the newest format this package reads and writes.
	Version = 4
	// DefaultFormat is the format written unless the operator chose
	// another: the newest one the last release reads.
	DefaultFormat = 3
	// journalFormats is the oldest format with a journal and sequence
	// numbers.
	journalFormat = 3
)

// stateV4 is the data of a version 4 file.
type stateV4 struct {
	Node    string             `json:"node"`
	Holders map[string]*Holder `json:"holders"`
}

// stateV3 is the data of a version 1, 2 or 3 file: pods by
// "namespace/name" and (from version 2) claims by UID.
type stateV3 struct {
	Node   string              `json:"node"`
	Pods   map[string]*podV3   `json:"pods"`
	Claims map[string]*claimV3 `json:"claims,omitempty"`
}

// podV3 is a pod's record as versions 1 to 3 wrote it.
type podV3 struct {
	UID       string              `json:"uid"`
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	VNI       uint16              `json:"vni"`
	Scope     string              `json:"scope"`
	LeaseKey  string              `json:"leaseKey,omitempty"`
	Local     bool                `json:"local,omitempty"`
	Netns     uint32              `json:"netns,omitempty"`
	Services  []serviceV3         `json:"services"`
	DeviceIDs map[string][]string `json:"deviceIDs"`
	Created   time.Time           `json:"created"`
	Exited    *time.Time          `json:"exited,omitempty"`
	Released  bool                `json:"released,omitempty"`
	Network   string              `json:"network,omitempty"`
	CollEnv   []string            `json:"collEnv,omitempty"`
	HSN       *HSNLink            `json:"hsn,omitempty"`
	Options   *ServiceOptions     `json:"options,omitempty"`
	// MoreHSN is new beside version 3 (multi-rail): an agent of 0.2.0
	// ignores it, knows the first interface, and releases every address
	// of the pod by its owner prefix.
	MoreHSN []HSNLink `json:"moreHSN,omitempty"`
}

type serviceV3 struct {
	NIC  string   `json:"nic"`
	ID   uint32   `json:"id"`
	VNIs []uint16 `json:"vnis"`
}

// claimV3 is a claim's record as versions 2 and 3 wrote it.
type claimV3 struct {
	UID         string           `json:"uid"`
	Namespace   string           `json:"namespace"`
	Name        string           `json:"name"`
	Pods        []ClaimPod       `json:"pods,omitempty"`
	Config      ClaimConfig      `json:"config"`
	Results     []ClaimResult    `json:"results"`
	LeaseKey    string           `json:"leaseKey,omitempty"`
	VNI         uint16           `json:"vni"`
	Scope       string           `json:"scope,omitempty"`
	Local       bool             `json:"local,omitempty"`
	Released    bool             `json:"released,omitempty"`
	CollEnv     []string         `json:"collEnv,omitempty"`
	Services    []claimServiceV3 `json:"services,omitempty"`
	BoundPod    string           `json:"boundPod,omitempty"`
	BoundNetns  string           `json:"boundNetns,omitempty"`
	Prepared    bool             `json:"prepared,omitempty"`
	Unpreparing bool             `json:"unpreparing,omitempty"`
	Created     time.Time        `json:"created"`
	Options     *ServiceOptions  `json:"options,omitempty"`
	// HSN and MoreHSN are new beside version 3 (a claim's hsn
	// interfaces); an agent of 0.2.0 ignores them.
	HSN     *HSNLink  `json:"hsn,omitempty"`
	MoreHSN []HSNLink `json:"moreHSN,omitempty"`
}

type claimServiceV3 struct {
	NIC   string `json:"nic"`
	ID    uint32 `json:"id"`
	Netns uint32 `json:"netns,omitempty"`
}

// encodeData encodes s's data in format version.
func encodeData(s *State, version int) ([]byte, error) {
	if version >= 4 {
		return json.Marshal(stateV4{Node: s.Node, Holders: s.Holders})
	}
	old := stateV3{Node: s.Node, Pods: map[string]*podV3{}}
	for id, h := range s.Holders {
		switch h.Kind {
		case KindPod:
			old.Pods[id] = podToV3(h)
		case KindClaim:
			if old.Claims == nil {
				old.Claims = map[string]*claimV3{}
			}
			old.Claims[h.UID] = claimToV3(h)
		default:
			return nil, fmt.Errorf("holder %s of kind %q has no version %d form", id, h.Kind, version)
		}
	}
	return json.Marshal(old)
}

// decodeData decodes the data of a file of format version.
func decodeData(data []byte, version int) (*State, error) {
	if version >= 4 {
		var v stateV4
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, err
		}
		s := &State{Node: v.Node, Holders: v.Holders}
		if s.Holders == nil {
			s.Holders = map[string]*Holder{}
		}
		for id, h := range s.Holders {
			if h == nil || (h.Kind != KindPod && h.Kind != KindClaim) || h.ID() != id {
				return nil, fmt.Errorf("holder entry %q does not match its key", id)
			}
			if h.Kind == KindPod && h.DeviceIDs == nil {
				h.DeviceIDs = map[string][]string{}
			}
		}
		return s, nil
	}
	var v stateV3
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	s := New(v.Node)
	for key, p := range v.Pods {
		if p == nil || PodID(p.Namespace, p.Name) != key {
			return nil, fmt.Errorf("pod entry %q does not match its key", key)
		}
		s.Holders[key] = podFromV3(p)
	}
	for uid, c := range v.Claims {
		if c == nil || c.UID != uid {
			return nil, fmt.Errorf("claim entry %q does not match its UID", uid)
		}
		h := claimFromV3(c)
		s.Holders[h.ID()] = h
	}
	return s, nil
}

func podToV3(h *Holder) *podV3 {
	p := &podV3{
		UID: h.UID, Namespace: h.Namespace, Name: h.Name, VNI: h.VNI, Scope: h.Scope,
		LeaseKey: h.LeaseKey, Local: h.Local, Netns: h.Netns, Services: []serviceV3{},
		DeviceIDs: h.DeviceIDs, Created: h.Created, Exited: h.Exited, Released: h.Released,
		Network: h.Network, CollEnv: h.CollEnv, Options: h.Options,
	}
	if p.DeviceIDs == nil {
		p.DeviceIDs = map[string][]string{}
	}
	for _, s := range h.Services {
		p.Services = append(p.Services, serviceV3{NIC: s.NIC, ID: s.ID, VNIs: s.VNIs})
	}
	p.HSN, p.MoreHSN = h.HSN, h.MoreHSN
	return p
}

func podFromV3(p *podV3) *Holder {
	h := &Holder{
		Kind: KindPod, UID: p.UID, Namespace: p.Namespace, Name: p.Name, VNI: p.VNI, Scope: p.Scope,
		LeaseKey: p.LeaseKey, Local: p.Local, Netns: p.Netns, DeviceIDs: p.DeviceIDs, Created: p.Created,
		Exited: p.Exited, Released: p.Released, Network: p.Network, CollEnv: p.CollEnv, Options: p.Options,
	}
	if h.DeviceIDs == nil {
		h.DeviceIDs = map[string][]string{}
	}
	for _, s := range p.Services {
		// A pod's services all admit the pod's one recorded member.
		h.Services = append(h.Services, Service{NIC: s.NIC, ID: s.ID, VNIs: s.VNIs, Netns: p.Netns})
	}
	h.HSN, h.MoreHSN = p.HSN, p.MoreHSN
	return h
}

func claimToV3(h *Holder) *claimV3 {
	c := &claimV3{
		UID: h.UID, Namespace: h.Namespace, Name: h.Name, Pods: h.Pods, Config: h.Config, Results: h.Results,
		LeaseKey: h.LeaseKey, VNI: h.VNI, Scope: h.Scope, Local: h.Local, Released: h.Released,
		CollEnv: h.CollEnv, BoundPod: h.BoundPod, BoundNetns: h.BoundNetns, Prepared: h.Prepared,
		Unpreparing: h.Unpreparing, Created: h.Created, Options: h.Options, HSN: h.HSN, MoreHSN: h.MoreHSN,
	}
	for _, s := range h.Services {
		c.Services = append(c.Services, claimServiceV3{NIC: s.NIC, ID: s.ID, Netns: s.Netns})
	}
	return c
}

func claimFromV3(c *claimV3) *Holder {
	h := &Holder{
		Kind: KindClaim, UID: c.UID, Namespace: c.Namespace, Name: c.Name, Pods: c.Pods, Config: c.Config,
		Results: c.Results, LeaseKey: c.LeaseKey, VNI: c.VNI, Scope: c.Scope, Local: c.Local,
		Released: c.Released, CollEnv: c.CollEnv, BoundPod: c.BoundPod, BoundNetns: c.BoundNetns,
		Prepared: c.Prepared, Unpreparing: c.Unpreparing, Created: c.Created, Options: c.Options,
		HSN: c.HSN, MoreHSN: c.MoreHSN,
	}
	// Versions 2 and 3 did not record a claim's VNIs per service: its
	// services carry the claim's.
	vnis := c.Options.VNIs(c.VNI)
	for _, s := range c.Services {
		var sv []uint16
		if c.VNI != 0 {
			sv = append([]uint16(nil), vnis...)
		}
		h.Services = append(h.Services, Service{NIC: s.NIC, ID: s.ID, VNIs: sv, Netns: s.Netns})
		if s.Netns != 0 {
			h.Netns = s.Netns
		}
	}
	return h
}

// LegacyClaim decodes one claim record as the DRA front end kept it in
// its own file before the claims joined the checkpoint (the shape
// versions 2 and 3 still write).
func LegacyClaim(b []byte) (Holder, error) {
	var c claimV3
	if err := json.Unmarshal(b, &c); err != nil {
		return Holder{}, err
	}
	return *claimFromV3(&c), nil
}
