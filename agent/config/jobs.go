package config

import (
	"errors"
	"fmt"
	"slices"
)

// JobOptions is the admin's policy for what a job may ask of its services
// (the pod annotation slingshot.hpe.com/service-options, or the same
// fields in a claim's CXIClaimConfig): Slurm's SwitchParameters, per
// namespace. A pod that asks nothing gets trafficClasses and limits, as
// before.
type JobOptions struct {
	// TrafficClasses says which classes a job may ask for.
	TrafficClasses TCPolicy `json:"trafficClasses"`
	// MaxDepth caps a job's depth (ranks per pod on a NIC). Default 256.
	MaxDepth int `json:"maxDepth"`
	// AdjustLimits lowers each NIC's maxima by what its system services
	// reserve before a job's reservation is capped by them, as Slurm's
	// adjust_limits (on by default there too).
	AdjustLimits *bool `json:"adjustLimits,omitempty"`
	// Resources are the per-rank defaults (def) and the caps (max), by
	// resource (ACs, CTs, EQs, LEs, PTEs, TGQs, TLEs, TXQs); omitted ones
	// keep Slurm's defaults, except TLEs, whose def is 0 (see
	// DefaultJobResources).
	Resources map[string]JobResource `json:"resources,omitempty"`
	// ExtraVNIs are the VNIs a job may add to its services by name, such
	// as a storage VNI (DAOS). They are fixed numbers, shared by every job
	// that joins them, so they must lie outside the VNI range the
	// controller leases (--managed-vnis).
	ExtraVNIs []NamedVNI `json:"extraVNIs,omitempty"`
}

// TCPolicy says which traffic classes jobs may ask for.
type TCPolicy struct {
	// Everyone lists the classes every namespace may ask for. Default
	// LOW_LATENCY and BEST_EFFORT, Slurm's default set.
	Everyone []string `json:"everyone"`
	// Namespaces lists, by namespace, the classes it may ask for beyond
	// Everyone: DEDICATED_ACCESS and BULK_DATA are not for everyone.
	Namespaces map[string][]string `json:"namespaces,omitempty"`
}

// JobResource is one resource's per-rank default and cap.
type JobResource struct {
	// Def is reserved per rank: a job's reservation is Def times its depth
	// unless it names one.
	Def uint16 `json:"def"`
	// Max caps a job's maximum and reservation; a job asking more is
	// refused. The NIC's own maximum caps it further.
	Max uint16 `json:"max"`
}

// NamedVNI is a VNI jobs may join by name.
type NamedVNI struct {
	Name string `json:"name"`
	VNI  uint16 `json:"vni"`
	// Namespaces may join it; empty: none may (an entry that admits
	// everyone says so by listing "*").
	Namespaces []string `json:"namespaces"`
}

// DefaultJobResources are Slurm's per-rank defaults and maxima
// (switch_hpe_slingshot.h), but for TLEs' def, 0: any TLE reservation
// takes one of a NIC's 4 TLE pools, one of which the default service
// holds, so Slurm's def of 1 would cap a NIC at 3 pods that asked for a
// depth. A job that uses triggered operations asks for TLEs, or the admin
// sets a def.
func DefaultJobResources() map[string]JobResource {
	return map[string]JobResource{
		"TXQs": {Def: 2, Max: 1024}, "TGQs": {Def: 1, Max: 512}, "EQs": {Def: 2, Max: 2047},
		"CTs": {Def: 1, Max: 2047}, "TLEs": {Def: 0, Max: 2048}, "PTEs": {Def: 6, Max: 2048},
		"LEs": {Def: 16, Max: 16384}, "ACs": {Def: 2, Max: 1022},
	}
}

// DefaultJobOptions is the policy of a configuration that says nothing.
func DefaultJobOptions() JobOptions {
	return JobOptions{
		TrafficClasses: TCPolicy{Everyone: []string{"LOW_LATENCY", "BEST_EFFORT"}},
		MaxDepth:       256,
	}
}

// Adjust reports whether the NICs' maxima are lowered by their system
// services' reservations (default true).
func (j *JobOptions) Adjust() bool { return j.AdjustLimits == nil || *j.AdjustLimits }

// ResourcePolicy returns the def and max of each resource, the defaults
// overridden by Resources.
func (j *JobOptions) ResourcePolicy() map[string]JobResource {
	out := DefaultJobResources()
	for name, r := range j.Resources {
		out[name] = r
	}
	return out
}

// reservedVNIs are the default service's VNIs (default_vnis): never a
// job's, never a named one.
var reservedVNIs = []uint16{1, 10}

func validateJobOptions(j *JobOptions) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: jobOptions.%s: %s", ErrInvalid, field, fmt.Sprintf(format, args...)))
	}
	for _, tc := range j.TrafficClasses.Everyone {
		if !trafficClasses[tc] {
			bad("trafficClasses.everyone", "unknown class %q", tc)
		}
	}
	for ns, tcs := range j.TrafficClasses.Namespaces {
		if !dnsLabel.MatchString(ns) || len(ns) > 63 {
			bad("trafficClasses.namespaces", "%q is not a namespace name", ns)
		}
		for _, tc := range tcs {
			if !trafficClasses[tc] {
				bad("trafficClasses.namespaces."+ns, "unknown class %q", tc)
			}
		}
	}
	if j.MaxDepth < 1 || j.MaxDepth > 0xffff {
		bad("maxDepth", "%d is outside 1..65535", j.MaxDepth)
	}
	for name, r := range j.Resources {
		if !limitNames[name] {
			bad("resources", "unknown resource %q", name)
		} else if r.Max == 0 && r.Def > 0 {
			bad("resources."+name, "def %d with max 0: nothing could be reserved", r.Def)
		}
	}
	names := map[string]bool{}
	vnis := map[uint16]string{}
	for i, v := range j.ExtraVNIs {
		f := fmt.Sprintf("extraVNIs[%d]", i)
		if !dnsLabel.MatchString(v.Name) || len(v.Name) > 63 {
			bad(f+".name", "%q is not a DNS label", v.Name)
		}
		if names[v.Name] {
			bad(f+".name", "%q is defined twice", v.Name)
		}
		names[v.Name] = true
		switch {
		case v.VNI == 0:
			bad(f+".vni", "0 is not a VNI")
		case slices.Contains(reservedVNIs, v.VNI):
			bad(f+".vni", "%d is the driver's default service's", v.VNI)
		case vnis[v.VNI] != "":
			bad(f+".vni", "%d is also %q's", v.VNI, vnis[v.VNI])
		}
		vnis[v.VNI] = v.Name
		for _, ns := range v.Namespaces {
			if ns != "*" && (!dnsLabel.MatchString(ns) || len(ns) > 63) {
				bad(f+".namespaces", "%q is not a namespace name (or *)", ns)
			}
		}
	}
	return errs
}

// ErrNamedVNIManaged is matched by CheckNamedVNIs' error.
var ErrNamedVNIManaged = errors.New("a named VNI lies in the managed VNI range")

// CheckNamedVNIs checks that no named VNI lies in lo..hi, the range the
// controller leases to jobs: a job leased it would share it with every
// pod that joins the name.
func (c *Config) CheckNamedVNIs(lo, hi uint16) error {
	var errs []error
	for i, v := range c.JobOptions.ExtraVNIs {
		if v.VNI >= lo && v.VNI <= hi {
			errs = append(errs, fmt.Errorf("%w: jobOptions.extraVNIs[%d] (%s) is VNI %d, inside %d-%d that the controller leases to jobs", ErrNamedVNIManaged, i, v.Name, v.VNI, lo, hi))
		}
	}
	return errors.Join(errs...)
}
