// Package jobreq parses what a job asks of its CXI services, the choices
// Slurm's switch/hpe_slingshot plugin gives a job through --network: the
// traffic classes, the ranks per pod on a NIC (depth), the reservation of
// each NIC resource, and extra VNIs by name (a storage VNI). A pod asks in
// its annotation [Annotation]; a DRA claim asks with the same fields in its
// CXIClaimConfig. It checks only the grammar; what a namespace may ask for
// is the agent's policy (package agent/jobpolicy).
package jobreq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/slingshot-k8s/slingshot/cxi"
)

// Annotation is the pod annotation that carries a Request as JSON (device
// plugin mode).
const Annotation = "slingshot.hpe.com/service-options"

// MaxLen bounds the annotation's size: a few short fields.
const MaxLen = 4096

// MaxDepth is the most ranks per pod on a NIC the grammar accepts; Slurm
// keeps the count in 16 bits. The policy usually caps it lower.
const MaxDepth = 0xffff

// MaxExtraVNIs is how many named VNIs a service may carry beside the
// job's: the driver takes 4 VNIs per service (CXI_SVC_MAX_VNIS).
const MaxExtraVNIs = cxi.MaxVNIs - 1

// ErrInvalid is matched by every error of Parse and Request.Validate.
var ErrInvalid = errors.New("invalid service options")

// Request is what a job asks for. Every field is optional: the zero value
// asks for nothing, and the pod gets the node's defaults, as before.
type Request struct {
	// TrafficClasses the services may use, by the driver's names
	// (DEDICATED_ACCESS, LOW_LATENCY, BULK_DATA, BEST_EFFORT; case does
	// not matter, a TC_ prefix is allowed, as in Slurm's tcs=). They
	// become SLINGSHOT_TCS.
	TrafficClasses []string `json:"trafficClasses,omitempty"`
	// Depth is the ranks (processes) of the pod that use one NIC: each
	// resource's reservation is its per-rank default times Depth, as
	// Slurm's --network=depth=N.
	Depth int `json:"depth,omitempty"`
	// Resources overrides, by resource (ACs, CTs, EQs, LEs, PTEs, TGQs,
	// TLEs, TXQs), the per-rank default, the reservation or the maximum
	// (Slurm's def_, res_ and max_ of --network).
	Resources map[string]Resource `json:"resources,omitempty"`
	// VNIs are extra VNIs by the names the admin gave them (a storage
	// VNI), carried after the job's VNI.
	VNIs []string `json:"vnis,omitempty"`
}

// Resource is a job's choice for one NIC resource; nil fields keep the
// policy's value. Numbers are ints so that an out-of-range one is named
// by Validate rather than lost in a decoding error.
type Resource struct {
	// Def is the per-rank reservation, multiplied by the depth.
	Def *int `json:"def,omitempty"`
	// Res is the whole reservation; it overrides Def times depth.
	Res *int `json:"res,omitempty"`
	// Max is the most the service may use.
	Max *int `json:"max,omitempty"`
}

// ResourceNames are the resource names a Request uses, as the agent's
// configuration names them (limits:), in the driver's order.
var ResourceNames = []string{"PTEs", "TXQs", "TGQs", "EQs", "CTs", "LEs", "TLEs", "ACs"}

// IsZero reports whether r asks for nothing.
func (r Request) IsZero() bool {
	return len(r.TrafficClasses) == 0 && r.Depth == 0 && len(r.Resources) == 0 && len(r.VNIs) == 0
}

// Parse reads an annotation's value: one JSON object with the fields of
// Request. Unknown fields are refused, so that a typo is not silently
// ignored. The result is validated and canonical (see Validate). Errors
// wrap ErrInvalid.
func Parse(s string) (Request, error) {
	if len(s) > MaxLen {
		return Request{}, fmt.Errorf("%w: annotation %s is %d bytes, more than %d", ErrInvalid, Annotation, len(s), MaxLen)
	}
	return Decode([]byte(s), "annotation "+Annotation)
}

// Decode reads one JSON object with the fields of Request, naming where
// it came from in errors, and validates it. Errors wrap ErrInvalid.
func Decode(data []byte, where string) (Request, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Request
	if err := dec.Decode(&r); err != nil {
		return Request{}, fmt.Errorf("%w: %s: want a JSON object with trafficClasses, depth, resources, vnis: %v", ErrInvalid, where, err)
	}
	if dec.More() {
		return Request{}, fmt.Errorf("%w: %s: trailing data after the JSON object", ErrInvalid, where)
	}
	if err := r.Canonicalize(); err != nil {
		return Request{}, fmt.Errorf("%s: %w", where, err)
	}
	return r, nil
}

// Canonicalize checks r's grammar and rewrites its names in their
// canonical spelling (traffic classes upper case without TC_, resources as
// in ResourceNames), so that two spellings of one request compare equal.
// Errors wrap ErrInvalid and name the field at fault.
func (r *Request) Canonicalize() error {
	seen := map[string]bool{}
	for i, name := range r.TrafficClasses {
		c, ok := canonicalTC(name)
		if !ok {
			return fmt.Errorf("%w: trafficClasses[%d]: unknown class %q, want DEDICATED_ACCESS, LOW_LATENCY, BULK_DATA or BEST_EFFORT", ErrInvalid, i, name)
		}
		if seen[c] {
			return fmt.Errorf("%w: trafficClasses[%d]: %s listed twice", ErrInvalid, i, c)
		}
		seen[c] = true
		r.TrafficClasses[i] = c
	}
	if r.Depth < 0 || r.Depth > MaxDepth {
		return fmt.Errorf("%w: depth: %d is outside 1..%d", ErrInvalid, r.Depth, MaxDepth)
	}
	if len(r.Resources) > 0 {
		out := make(map[string]Resource, len(r.Resources))
		for _, name := range slices.Sorted(maps.Keys(r.Resources)) {
			c, ok := canonicalResource(name)
			if !ok {
				return fmt.Errorf("%w: resources: unknown resource %q, want one of %s", ErrInvalid, name, strings.Join(ResourceNames, ", "))
			}
			if _, dup := out[c]; dup {
				return fmt.Errorf("%w: resources: %s given twice (as %q)", ErrInvalid, c, name)
			}
			res := r.Resources[name]
			for _, f := range []struct {
				field string
				v     *int
			}{{"def", res.Def}, {"res", res.Res}, {"max", res.Max}} {
				if f.v != nil && (*f.v < 0 || *f.v > 0xffff) {
					return fmt.Errorf("%w: resources.%s.%s: %d is outside 0..65535", ErrInvalid, c, f.field, *f.v)
				}
			}
			if res.Res != nil && res.Max != nil && *res.Res > *res.Max {
				return fmt.Errorf("%w: resources.%s: res %d exceeds max %d", ErrInvalid, c, *res.Res, *res.Max)
			}
			out[c] = res
		}
		r.Resources = out
	}
	if len(r.VNIs) > MaxExtraVNIs {
		return fmt.Errorf("%w: vnis: %d names, but a service carries at most %d VNIs beside the job's", ErrInvalid, len(r.VNIs), MaxExtraVNIs)
	}
	for i, name := range r.VNIs {
		if !isDNSLabel(name) {
			return fmt.Errorf("%w: vnis[%d]: %q is not a VNI name (a DNS label)", ErrInvalid, i, name)
		}
		if slices.Contains(r.VNIs[:i], name) {
			return fmt.Errorf("%w: vnis[%d]: %q listed twice", ErrInvalid, i, name)
		}
	}
	return nil
}

// TCs returns the requested traffic classes as a set; 0 when none were
// asked for. r must be canonical.
func (r Request) TCs() cxi.TrafficClasses {
	var tcs cxi.TrafficClasses
	for _, name := range r.TrafficClasses {
		if t, err := cxi.ParseTrafficClasses(name); err == nil {
			tcs |= t
		}
	}
	return tcs
}

// Merge returns base with the fields over sets replacing base's: a
// DeviceClass's options first, then the claim's. Resources merge by
// resource and field.
func Merge(base, over Request) Request {
	out := base
	if len(over.TrafficClasses) > 0 {
		out.TrafficClasses = slices.Clone(over.TrafficClasses)
	}
	if over.Depth != 0 {
		out.Depth = over.Depth
	}
	if len(over.VNIs) > 0 {
		out.VNIs = slices.Clone(over.VNIs)
	}
	if len(over.Resources) > 0 {
		merged := maps.Clone(base.Resources)
		if merged == nil {
			merged = map[string]Resource{}
		}
		for name, o := range over.Resources {
			m := merged[name]
			if o.Def != nil {
				m.Def = o.Def
			}
			if o.Res != nil {
				m.Res = o.Res
			}
			if o.Max != nil {
				m.Max = o.Max
			}
			merged[name] = m
		}
		out.Resources = merged
	}
	return out
}

var tcNames = []string{"DEDICATED_ACCESS", "LOW_LATENCY", "BULK_DATA", "BEST_EFFORT"}

func canonicalTC(s string) (string, bool) {
	u := strings.ToUpper(s)
	u = strings.TrimPrefix(u, "TC_")
	if slices.Contains(tcNames, u) {
		return u, true
	}
	return "", false
}

func canonicalResource(s string) (string, bool) {
	for _, n := range ResourceNames {
		if strings.EqualFold(n, s) {
			return n, true
		}
	}
	return "", false
}

// isDNSLabel reports whether s is 1 to 63 of [a-z0-9-], not starting or
// ending with "-".
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
