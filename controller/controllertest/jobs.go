package controllertest

import (
	"context"
	"fmt"
	"sync"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
)

// Jobs is a [controller.Resolver] over a table: pods by name, each with
// the owner that controls it and its network request, and the owners that
// are gone. Every pod gets the job policy (one VNI per owner) unless
// SetPolicy gives it another.
type Jobs struct {
	mu      sync.Mutex
	pods    map[string]store.Owner       // namespace/name of the pod
	network map[string]string            // namespace/name of the pod
	policy  map[string]controller.Policy // namespace/name of the pod
	gone    map[string]bool              // namespace/name of the owner
}

// NewJobs returns an empty table.
func NewJobs() *Jobs {
	return &Jobs{pods: map[string]store.Owner{}, network: map[string]string{},
		policy: map[string]controller.Policy{}, gone: map[string]bool{}}
}

// SetPolicy sets the policy ResolvePod reports for the pod, as if its
// [controller.AnnotationVNI] said so.
func (j *Jobs) SetPolicy(namespace, pod string, p controller.Policy) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.policy[namespace+"/"+pod] = p
}

// SetNetworkRequest sets the pod's network request, the value of its
// [controller.AnnotationNetwork] that ResolvePod reports; "" removes it.
func (j *Jobs) SetNetworkRequest(namespace, pod, request string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.network[namespace+"/"+pod] = request
}

// Job returns a batch/v1 Job named name in namespace ns, with a UID
// derived from both.
func Job(ns, name string) store.Owner {
	return store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: ns, Name: name, UID: "uid-" + ns + "-" + name}
}

// Add records pod, in its owner's namespace, as controlled by owner.
func (j *Jobs) Add(pod string, owner store.Owner) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pods[owner.Namespace+"/"+pod] = owner
}

// End marks owner deleted: OwnerExists answers false from now on.
func (j *Jobs) End(owner store.Owner) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.gone[owner.Namespace+"/"+owner.Name] = true
}

// ResolvePod implements [controller.Resolver]. A pod the table does not
// hold is an error wrapping [controller.ErrNotFound].
func (j *Jobs) ResolvePod(_ context.Context, p controller.PodRef) (controller.Resolution, error) {
	j.mu.Lock()
	owner, ok := j.pods[p.Namespace+"/"+p.Name]
	network := j.network[p.Namespace+"/"+p.Name]
	policy, set := j.policy[p.Namespace+"/"+p.Name]
	j.mu.Unlock()
	if !set {
		policy = controller.Policy{Mode: controller.ModeJob}
	}
	if !ok {
		return controller.Resolution{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, controller.ErrNotFound)
	}
	return controller.Resolution{
		Pod:            store.Owner{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Owner:          &owner,
		Policy:         policy,
		NetworkRequest: network,
	}, nil
}

// OwnerExists implements [controller.Resolver].
func (j *Jobs) OwnerExists(_ context.Context, o store.Owner) (bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return !j.gone[o.Namespace+"/"+o.Name], nil
}
