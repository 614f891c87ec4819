// Package simstate reads the services of the simulated CXI driver (package
// cxi/sim) from its state files, without the driver's lock and without
// writing anything: the driver replaces a state file by rename, so a
// reader always sees one whole state. The real node's tests read it from
// the node, and the test workload from inside a pod, through a read-only
// mount of the agent's state directory, to see what a service was when
// the container's own code first ran.
package simstate

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// Service is one service of a simulated NIC, as its state file holds it.
type Service struct {
	NIC     string   `json:"nic"`
	ID      uint32   `json:"id"`
	Enabled bool     `json:"enabled"`
	System  bool     `json:"system,omitempty"`
	VNIs    []uint16 `json:"vnis,omitempty"`
	// VNIMin and VNIMax are the VNI range of a service without restricted
	// VNIs; both 0 when it has none.
	VNIMin uint16 `json:"vniMin,omitempty"`
	VNIMax uint16 `json:"vniMax,omitempty"`
	// Open, UIDs, GIDs and NetNS are its access-control entries.
	Open  bool     `json:"open,omitempty"`
	UIDs  []uint32 `json:"uids,omitempty"`
	GIDs  []uint32 `json:"gids,omitempty"`
	NetNS []uint32 `json:"netns,omitempty"`
	// TCs are its traffic classes in SLINGSHOT_TCS form ("0x6"), "" when
	// it restricts none.
	TCs string `json:"tcs,omitempty"`
	// Reserved is what it reserves, by resource ("LEs"), from its
	// descriptor's limits; nil without resource limits.
	Reserved map[string]int `json:"reserved,omitempty"`
}

// OnlyNetns reports whether the service admits exactly the network
// namespace ino and nothing else.
func (s Service) OnlyNetns(ino uint32) bool {
	return !s.Open && len(s.UIDs) == 0 && len(s.GIDs) == 0 && slices.Equal(s.NetNS, []uint32{ino})
}

// stateFile is the part of the driver's state file that Read uses.
type stateFile struct {
	Services []struct {
		Desc string `json:"desc"` // hex of the 68-byte cxi_svc_desc
		ACL  struct {
			Open  bool     `json:"open"`
			UIDs  []uint32 `json:"uids"`
			GIDs  []uint32 `json:"gids"`
			NetNS []uint32 `json:"netns"`
		} `json:"acl"`
		Range *struct {
			Match  uint16 `json:"match"`
			Ignore uint16 `json:"ignore"`
		} `json:"range"`
	} `json:"services"`
}

// Read returns the services of the simulated NIC nic ("cxi0") whose state
// is in dir (the agent's state directory + "/cxi-sim"), in ID order.
func Read(dir, nic string) ([]Service, error) {
	b, err := os.ReadFile(filepath.Join(dir, nic+".json"))
	if err != nil {
		return nil, err
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("simulated %s: %w", nic, err)
	}
	out := make([]Service, 0, len(st.Services))
	for _, r := range st.Services {
		raw, err := hex.DecodeString(r.Desc)
		if err != nil {
			return nil, fmt.Errorf("simulated %s: descriptor: %w", nic, err)
		}
		var d uapi.SvcDesc
		if err := d.UnmarshalBinary(raw); err != nil {
			return nil, fmt.Errorf("simulated %s: %w", nic, err)
		}
		s := Service{
			NIC: nic, ID: d.SvcID, Enabled: d.Enable, System: d.IsSystemSvc, VNIs: d.ValidVNIs(),
			Open: r.ACL.Open, UIDs: r.ACL.UIDs, GIDs: r.ACL.GIDs, NetNS: r.ACL.NetNS,
		}
		if d.RestrictedTCs {
			var mask uint8
			for tc, on := range d.TCs {
				if on {
					mask |= 1 << tc
				}
			}
			s.TCs = fmt.Sprintf("0x%x", mask)
		}
		if d.ResourceLimits {
			s.Reserved = map[string]int{}
			for t, l := range d.Limits {
				if l.Res > 0 {
					s.Reserved[uapi.RsrcType(t).String()] = int(l.Res)
				}
			}
		}
		if r.Range != nil {
			s.VNIMin, s.VNIMax = r.Range.Match&^r.Range.Ignore, r.Range.Match|r.Range.Ignore
		}
		out = append(out, s)
	}
	return out, nil
}

// Find returns the service id of nic, and whether it exists.
func Find(dir, nic string, id uint32) (Service, bool, error) {
	svcs, err := Read(dir, nic)
	if err != nil {
		return Service{}, false, err
	}
	for _, s := range svcs {
		if s.ID == id {
			return s, true, nil
		}
	}
	return Service{}, false, nil
}
