package checkpoint

import (
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
