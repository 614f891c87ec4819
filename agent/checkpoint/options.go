package checkpoint

import (
	"fmt"
	"maps"
	"slices"
)

// ServiceOptions are the options a pod's or a claim's services were
// admitted with (its service-options request, checked against the
// agent's jobOptions), kept so that a service the driver lost is made
// again the same way, and the environment says the same, whatever the
// policy has become since. A record without them uses the node's
// defaults, as before they existed.
type ServiceOptions struct {
	// TCs is the traffic-class set, as SLINGSHOT_TCS's bits.
	TCs uint8 `json:"tcs"`
	// Depth is the ranks per NIC the reservations were computed for.
	Depth int `json:"depth,omitempty"`
	// Limits are what each service reserves and may use at most, by
	// resource name (PTEs, TXQs, ...), before a NIC's own maxima cap
	// them; nil: the node's limits.
	Limits map[string]Limit `json:"limits,omitempty"`
	// ExtraVNIs are the named VNIs the services carry after the job's,
	// in order.
	ExtraVNIs []NamedVNI `json:"extraVNIs,omitempty"`
}

// Limit is one resource's maximum and reservation.
type Limit struct {
	Max uint16 `json:"max"`
	Res uint16 `json:"res"`
}

// NamedVNI is a VNI joined by the name the admin gave it.
type NamedVNI struct {
	Name string `json:"name"`
	VNI  uint16 `json:"vni"`
}

// Clone returns a deep copy; nil stays nil.
func (o *ServiceOptions) Clone() *ServiceOptions {
	if o == nil {
		return nil
	}
	c := *o
	c.Limits = maps.Clone(o.Limits)
	c.ExtraVNIs = slices.Clone(o.ExtraVNIs)
	return &c
}

// VNIs returns the VNIs a service of a holder with primary VNI vni
// carries: vni first, then the extra ones, as SLINGSHOT_VNIS lists them.
func (o *ServiceOptions) VNIs(vni uint16) []uint16 {
	out := []uint16{vni}
	if o != nil {
		for _, e := range o.ExtraVNIs {
			out = append(out, e.VNI)
		}
	}
	return out
}

// names reports whether v is one of o's named VNIs.
func (o *ServiceOptions) names(v uint16) bool {
	return o != nil && slices.ContainsFunc(o.ExtraVNIs, func(n NamedVNI) bool { return n.VNI == v })
}

// checkVNIs checks the rule "no VNI held by two jobs" over every VNI a
// holder's services carry: each is the holder's own (leased) VNI or one
// it joined by name. Named VNIs are shared by design and exempt, but never
// a holder's own VNI (see checkNamedVNIs).
func checkVNIs(st *State, h *Holder) error {
	for _, svc := range h.Services {
		if h.VNI != 0 && !slices.Contains(svc.VNIs, h.VNI) {
			return fmt.Errorf("%w: %s: service %d on %s lacks its VNI %d", ErrInvariant, h, svc.ID, svc.NIC, h.VNI)
		}
		for _, v := range svc.VNIs {
			if v != h.VNI && !h.Options.names(v) {
				return fmt.Errorf("%w: %s: service %d on %s carries VNI %d, neither its VNI %d nor one it joined by name", ErrInvariant, h, svc.ID, svc.NIC, v, h.VNI)
			}
		}
	}
	return checkNamedVNIs(st, h)
}

// checkNamedVNIs checks that h shares no VNI with another job through a
// name: its own VNI is nobody's named VNI, and none of its named VNIs is
// anybody's own. A holder is compared with itself too: its own VNI is
// none of its names.
func checkNamedVNIs(st *State, h *Holder) error {
	clash := func(o *Holder) error {
		if h.VNI != 0 && o.Options.names(h.VNI) {
			return fmt.Errorf("%w: %s's own VNI %d is a named VNI %s joins", ErrInvariant, h, h.VNI, o)
		}
		if o.VNI != 0 && h.Options.names(o.VNI) {
			return fmt.Errorf("%w: %s joins by name VNI %d, the own VNI of %s", ErrInvariant, h, o.VNI, o)
		}
		return nil
	}
	for id, o := range st.Holders {
		if id == h.ID() {
			continue
		}
		if err := clash(o); err != nil {
			return err
		}
	}
	return clash(h)
}
