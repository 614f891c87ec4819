package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// Defaults are the node's service settings: what a holder (pod or claim)
// that asked for no options gets, and whether fitted reservations are
// adjusted for the system services (jobOptions.adjustLimits).
type Defaults struct {
	TCs    cxi.TrafficClasses
	Limits *cxi.Limits
	Adjust bool
}

// ErrNamedVNIIsJobs is matched by ServiceSpec's error when a holder's own
// VNI is also one of its named VNIs: the controller leased a VNI the admin
// named (a configuration --managed-vnis should have refused), and the
// job would share it with every pod that joins the name.
var ErrNamedVNIIsJobs = errors.New("a job's VNI is also a named VNI")

// ServiceSpec is the spec of a service for a holder with primary VNI vni
// and recorded options o (nil: the node's defaults, exactly as before
// options existed), members aside: VNIs the job's first and then the
// named ones, the options' traffic classes, and their reservations fitted
// to the NIC (cxi.Fit) when they set any.
func ServiceSpec(vni uint16, o *checkpoint.ServiceOptions, d Defaults) (cxi.ServiceSpec, error) {
	spec := cxi.ServiceSpec{VNIs: o.VNIs(vni), TCs: TCs(o, d), Limits: d.Limits}
	if o == nil {
		return spec, nil
	}
	if i := slices.IndexFunc(o.ExtraVNIs, func(n checkpoint.NamedVNI) bool { return n.VNI == vni }); i >= 0 {
		return cxi.ServiceSpec{}, fmt.Errorf("%w: VNI %d is named %q (jobOptions.extraVNIs); it must lie outside the range the controller leases", ErrNamedVNIIsJobs, vni, o.ExtraVNIs[i].Name)
	}
	if o.Limits != nil {
		spec.Limits = limitsOf(o.Limits)
		spec.Fit = &cxi.Fit{AdjustLimits: d.Adjust}
	}
	return spec, nil
}

// Pools says which pools of its NIC a service of a holder with options o
// takes for itself (cxi.Limits.Pools). Options the node would refuse take
// none here; the service is refused anyway.
func (e *Engine) Pools(o *checkpoint.ServiceOptions) (lePool, tlePool bool) {
	spec, err := ServiceSpec(0, o, e.defaults())
	if err != nil || spec.Limits == nil {
		return false, false
	}
	return spec.Limits.Pools()
}

// TCs are the traffic classes of a holder with options o: theirs, or the
// node's.
func TCs(o *checkpoint.ServiceOptions, d Defaults) cxi.TrafficClasses {
	if o == nil || o.TCs == 0 {
		return d.TCs
	}
	return cxi.TrafficClasses(o.TCs)
}

// Extra are the named VNIs of options o, in order.
func Extra(o *checkpoint.ServiceOptions) []uint16 {
	if o == nil {
		return nil
	}
	return o.VNIs(0)[1:]
}

// CarriesAll reports whether a service with VNIs have carries every VNI
// of want: a service made before the holder's options changed nothing
// else is kept, one lacking a VNI is made again.
func CarriesAll(have, want []uint16) bool {
	for _, v := range want {
		if !slices.Contains(have, v) {
			return false
		}
	}
	return true
}

// limitsOf converts recorded limits to the cxi form. Resources the record
// does not name reserve nothing and have the Cassini maximum, but TLEs,
// which have none (cxi.DefaultLimits).
func limitsOf(m map[string]checkpoint.Limit) *cxi.Limits {
	l := cxi.DefaultLimits()
	field := map[string]*cxi.Limit{
		"ACs": &l.ACs, "CTs": &l.CTs, "EQs": &l.EQs, "LEs": &l.LEs,
		"PTEs": &l.PTEs, "TGQs": &l.TGQs, "TLEs": &l.TLEs, "TXQs": &l.TXQs,
	}
	for name, v := range m {
		if f := field[name]; f != nil {
			*f = cxi.Limit{Max: v.Max, Res: v.Res}
		}
	}
	return &l
}
