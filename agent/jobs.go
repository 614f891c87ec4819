package agent

import (
	"fmt"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// defaults are the node's service settings, what a pod that asked for no
// options gets.
func (p policy) defaults() engine.Defaults {
	return engine.Defaults{TCs: p.tcs, Limits: p.limits, Adjust: p.adjust}
}

// jobPolicy is the policy's jobOptions; a policy made without them (a
// test's) has the defaults.
func (p policy) jobPolicy() *jobpolicy.Policy {
	if p.jobs == nil {
		return jobpolicy.New(config.Default())
	}
	return p.jobs
}

// optionsFor resolves the service options pod asks for in its annotation
// jobreq.Annotation, as the runtime reported the sandbox's annotations
// with its namespace (h). nil asks nothing: the node's defaults. Where the
// runtime told nothing (the namespace found through /proc, or a fallback
// member) the annotation cannot be read, and the pod gets the defaults
// too. A request the grammar or the policy refuses fails the bind, before
// any lease, with an error naming the field.
func (b *binder) optionsFor(pod *podwatch.Pod, h nsHandle) (*checkpoint.ServiceOptions, error) {
	if h == nil {
		return nil, nil
	}
	m, ok := h.(podMeta)
	if !ok {
		return nil, nil
	}
	_, annotations := m.PodMeta()
	raw, ok := annotations[jobreq.Annotation]
	if !ok {
		return nil, nil
	}
	req, err := jobreq.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod.Key(), err)
	}
	o, err := b.policy().jobPolicy().Resolve(pod.Namespace, req)
	if err != nil {
		return nil, fmt.Errorf("pod %s, annotation %s: %w", pod.Key(), jobreq.Annotation, err)
	}
	return o, nil
}
