package devplugin

import (
	"context"
	"fmt"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// jobPolicy is what pods may ask for their services; where none was
// given (a test's binder), the defaults.
func (b *binder) jobPolicy() *jobpolicy.Policy {
	if b.jobs == nil {
		return jobpolicy.New(config.Default())
	}
	if p := b.jobs(); p != nil {
		return p
	}
	return jobpolicy.New(config.Default())
}

// optionsFor resolves the service options pod asks for in its annotation
// jobreq.Annotation, as the runtime reported the sandbox's annotations
// with its namespace (h). nil asks nothing: the node's defaults. Where the
// runtime told nothing (the namespace found through /proc, or a fallback
// member) the annotations are read from the API server
// (binder.annotations), and a failed read fails the bind, which the
// kubelet retries: a pod must not run for good without the options it
// asked for. With no API server (--no-kube) the annotation cannot be
// read, and the pod gets the defaults. A request the grammar or the
// policy refuses fails the bind, before any lease, with an error naming
// the field.
func (b *binder) optionsFor(ctx context.Context, pod *podwatch.Pod, h nsHandle) (*checkpoint.ServiceOptions, error) {
	annotations, err := b.podAnnotations(ctx, pod, h)
	if err != nil {
		return nil, err
	}
	raw, ok := annotations[jobreq.Annotation]
	if !ok {
		return nil, nil
	}
	req, err := jobreq.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod.Key(), err)
	}
	o, err := b.jobPolicy().Resolve(pod.Namespace, req)
	if err != nil {
		return nil, fmt.Errorf("pod %s, annotation %s: %w", pod.Key(), jobreq.Annotation, err)
	}
	return o, nil
}

// AnnotationReader reads a pod's annotations from the API server; the
// pod's UID must match.
type AnnotationReader func(ctx context.Context, namespace, name, uid string) (map[string]string, error)

// podAnnotations are pod's annotations: the runtime's, reported with the
// sandbox, else the API server's; nil where neither can tell.
func (b *binder) podAnnotations(ctx context.Context, pod *podwatch.Pod, h nsHandle) (map[string]string, error) {
	if m, ok := h.(podMeta); ok && h != nil {
		if labels, annotations := m.PodMeta(); labels != nil || annotations != nil {
			return annotations, nil
		}
	}
	if b.annotations == nil {
		return nil, nil
	}
	annotations, err := b.annotations(ctx, pod.Namespace, pod.Name, pod.UID)
	if err != nil {
		return nil, fmt.Errorf("pod %s: its annotations (%s) could not be read from the runtime or the API server: %w", pod.Key(), jobreq.Annotation, err)
	}
	return annotations, nil
}
