package dra

import (
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// defaults are the node's service settings.
func (p Policy) defaults() engine.Defaults {
	return engine.Defaults{TCs: p.TCs, Limits: p.Limits, Adjust: p.Adjust}
}

// options resolves a claim's serviceOptions against the policy; nil asks
// nothing (the node's defaults). Errors name the field at fault.
func (p Policy) options(namespace string, req *jobreq.Request) (*checkpoint.ServiceOptions, error) {
	if req == nil {
		return nil, nil
	}
	jobs := p.Jobs
	if jobs == nil {
		jobs = jobpolicy.New(config.Default())
	}
	return jobs.Resolve(namespace, *req)
}
