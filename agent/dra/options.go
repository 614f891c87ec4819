package dra

import (
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// options resolves a claim's serviceOptions against the jobs policy; nil
// asks nothing (the node's defaults). Errors name the field at fault.
func (m *Manager) options(namespace string, req *jobreq.Request) (*checkpoint.ServiceOptions, error) {
	if req == nil {
		return nil, nil
	}
	var jobs *jobpolicy.Policy
	if m.cfg.Jobs != nil {
		jobs = m.cfg.Jobs()
	}
	if jobs == nil {
		jobs = jobpolicy.New(config.Default())
	}
	return jobs.Resolve(namespace, *req)
}
