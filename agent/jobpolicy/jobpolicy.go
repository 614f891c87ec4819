// Package jobpolicy decides what a job gets of what it asked for its
// services (a [jobreq.Request]): the admin's jobOptions say which traffic
// classes each namespace may use, how deep a job may go, how much of each
// NIC resource it may reserve, and which named VNIs it may join. A request
// outside them is refused with an error naming the field; one inside is
// turned into the options the pod's or claim's record keeps
// ([checkpoint.ServiceOptions]). It is pure: the NIC's own maxima and what
// is free on it are the cxi client's to check, at bind.
//
// A Policy is immutable once made and safe for concurrent use.
package jobpolicy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// ErrRefused is matched by every error of [Policy.Resolve]: the request
// asks for more than the namespace is allowed.
var ErrRefused = errors.New("service options refused")

// Options are what a pod's or claim's services are made with.
type Options = checkpoint.ServiceOptions

// Policy is the admin's jobOptions, ready to check requests against.
type Policy struct {
	defaultTCs cxi.TrafficClasses
	everyone   cxi.TrafficClasses
	byNS       map[string]cxi.TrafficClasses
	maxDepth   int
	resources  map[string]config.JobResource
	named      map[string]config.NamedVNI
}

// New makes the policy of a validated configuration: c.TrafficClasses
// are what a request that names none gets, c.JobOptions the bounds.
func New(c config.Config) *Policy {
	p := &Policy{
		defaultTCs: tcsOf(c.TrafficClasses),
		everyone:   tcsOf(c.JobOptions.TrafficClasses.Everyone),
		byNS:       map[string]cxi.TrafficClasses{},
		maxDepth:   c.JobOptions.MaxDepth,
		resources:  c.JobOptions.ResourcePolicy(),
		named:      map[string]config.NamedVNI{},
	}
	for ns, tcs := range c.JobOptions.TrafficClasses.Namespaces {
		p.byNS[ns] = tcsOf(tcs)
	}
	for _, v := range c.JobOptions.ExtraVNIs {
		p.named[v.Name] = v
	}
	return p
}

func tcsOf(names []string) cxi.TrafficClasses {
	var tcs cxi.TrafficClasses
	for _, n := range names {
		if t, err := cxi.ParseTrafficClasses(n); err == nil { // config.Validate refuses others
			tcs |= t
		}
	}
	return tcs
}

// Allowed returns the traffic classes namespace may ask for.
func (p *Policy) Allowed(namespace string) cxi.TrafficClasses {
	return p.everyone | p.byNS[namespace]
}

// Resolve checks req, made by a pod or claim of namespace, against the
// policy. A request that asks nothing gives nil: the node's defaults,
// exactly as before requests existed. Otherwise the options carry the
// traffic classes (the node's default set where req names none), the
// reservations where req sets a depth or resources, and the extra VNIs.
//
// Reservations are computed as Slurm's switch/hpe_slingshot does for a
// step: each resource's maximum is the job's max or else the admin's;
// its reservation is the job's res, or else its per-rank def (the job's
// or the admin's) times the depth (1 if unset), capped at the maximum.
// A job's explicit def, res or max above the admin's max is refused, as is
// a depth above maxDepth. TLEs follow the driver's rule (cass_svc.c): a
// service that reserves any takes a pool of its own, at least 8, and may
// use no more than it reserves; one reserving none gets a maximum of 0, so
// that it takes no pool.
//
// Errors match ErrRefused and name the field at fault.
func (p *Policy) Resolve(namespace string, req jobreq.Request) (*Options, error) {
	if req.IsZero() {
		return nil, nil
	}
	refuse := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: namespace %s: %s: %s", ErrRefused, namespace, field, fmt.Sprintf(format, args...))
	}
	o := &Options{TCs: uint8(p.defaultTCs)}
	if len(req.TrafficClasses) > 0 {
		allowed := p.Allowed(namespace)
		for i, name := range req.TrafficClasses {
			tc, err := cxi.ParseTrafficClasses(name)
			if err != nil {
				return nil, refuse(fmt.Sprintf("trafficClasses[%d]", i), "%v", err)
			}
			if tc&^allowed != 0 {
				return nil, refuse(fmt.Sprintf("trafficClasses[%d]", i), "%s is not allowed (the namespace may use %s; jobOptions.trafficClasses)",
					name, strings.Join(allowed.Names(), ", "))
			}
		}
		o.TCs = uint8(req.TCs())
	}
	if req.Depth > p.maxDepth {
		return nil, refuse("depth", "%d is above the most allowed, %d (jobOptions.maxDepth)", req.Depth, p.maxDepth)
	}
	if req.Depth > 0 || len(req.Resources) > 0 {
		limits, err := p.limits(req, refuse)
		if err != nil {
			return nil, err
		}
		o.Depth = max(req.Depth, 1)
		o.Limits = limits
	}
	for i, name := range req.VNIs {
		v, ok := p.named[name]
		if !ok {
			return nil, refuse(fmt.Sprintf("vnis[%d]", i), "no VNI is named %q (jobOptions.extraVNIs)", name)
		}
		if !slices.Contains(v.Namespaces, namespace) && !slices.Contains(v.Namespaces, "*") {
			return nil, refuse(fmt.Sprintf("vnis[%d]", i), "the namespace may not join VNI %q (jobOptions.extraVNIs[].namespaces)", name)
		}
		o.ExtraVNIs = append(o.ExtraVNIs, checkpoint.NamedVNI{Name: name, VNI: v.VNI})
	}
	return o, nil
}

// minPoolTLEs is the driver's CASS_MIN_POOL_TLES: a service reserving
// TLEs gets at least this many.
const minPoolTLEs = 8

func (p *Policy) limits(req jobreq.Request, refuse func(field, format string, args ...any) error) (map[string]checkpoint.Limit, error) {
	depth := max(req.Depth, 1)
	out := make(map[string]checkpoint.Limit, len(jobreq.ResourceNames))
	for _, name := range jobreq.ResourceNames {
		pol := p.resources[name]
		job := req.Resources[name]
		field := "resources." + name
		for _, f := range []struct {
			sub string
			v   *int
		}{{"def", job.Def}, {"res", job.Res}, {"max", job.Max}} {
			if f.v != nil && *f.v > int(pol.Max) {
				return nil, refuse(field+"."+f.sub, "%d is above the most allowed, %d (jobOptions.resources.%s.max)", *f.v, pol.Max, name)
			}
		}
		limMax := int(pol.Max)
		if job.Max != nil {
			limMax = *job.Max
		}
		def := int(pol.Def)
		if job.Def != nil {
			def = *job.Def
		}
		res := min(def*depth, limMax)
		if job.Res != nil {
			if *job.Res > limMax {
				return nil, refuse(field+".res", "%d is above the maximum asked, %d", *job.Res, limMax)
			}
			res = *job.Res
		}
		if name == "TLEs" {
			if res > 0 {
				res = max(res, minPoolTLEs)
				if res > int(pol.Max) {
					return nil, refuse(field, "a TLE reservation is at least %d, above the most allowed, %d", minPoolTLEs, pol.Max)
				}
			}
			limMax = res
		}
		out[name] = checkpoint.Limit{Max: uint16(limMax), Res: uint16(res)}
	}
	return out, nil
}
