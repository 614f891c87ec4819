package draclaim

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// The fabric's VNI device: one device in a cluster-wide ResourceSlice
// (allNodes) that the chart publishes with dra.podGroupClaims. A
// ResourceClaim of a PodGroup (Kubernetes' DRAWorkloadResourceClaims)
// asks for it, once, for every pod of the group on every node: a NIC is
// node-local and a claim is allocated once, for one node, so a group's
// claim of NICs could serve the pods of one node only. The claim's VNI is
// what each pod's own NIC claims carry, on every node.
const (
	// FabricPool is the pool of the cluster-wide slice.
	FabricPool = "fabric"
	// VNIDevice is its one device, shared by every group claim
	// (allowMultipleAllocations).
	VNIDevice = "vni"
	// TypeVNI is its attribute "type" (a NIC's is "nic").
	TypeVNI = "vni"
)

// IsGroupVNI reports whether the claim is allocated the fabric's VNI
// device of driver, and an error when it mixes that device with other
// devices of driver: a NIC is node-local, a group's claim is not, and one
// claim cannot be both.
func IsGroupVNI(claim *resourceapi.ResourceClaim, driver string) (bool, error) {
	if claim.Status.Allocation == nil {
		return false, nil
	}
	var vni, other bool
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driver {
			continue
		}
		if r.Pool == FabricPool && r.Device == VNIDevice {
			vni = true
		} else {
			other = true
		}
	}
	if vni && other {
		return true, fmt.Errorf("claim %s/%s asks for the fabric's VNI device and for NICs in one claim: a pod's NICs go in a claim of their own", claim.Namespace, claim.Name)
	}
	return vni, nil
}

// GroupPolicyPrefix starts the VNI policy of a pod whose NIC claims take
// the VNI of its group's claim: "resourceclaim:NAME/UID", the claim's
// name and UID. The controller keys the lease by the claim (a claim made
// again under the same name is another job, with another VNI) and frees
// it once the claim is gone and no node holds it. Only the agent sends
// it; a pod's annotation and a CXIClaimConfig cannot.
const GroupPolicyPrefix = "resourceclaim:"

// GroupPolicy is the VNI policy naming the group claim.
func GroupPolicy(claim *resourceapi.ResourceClaim) string {
	return GroupPolicyPrefix + claim.Name + "/" + string(claim.UID)
}

// ParseGroupPolicy reads a GroupPolicy: ok is false when v is not one;
// err, when it is one that is malformed.
func ParseGroupPolicy(v string) (name, uid string, ok bool, err error) {
	rest, ok := strings.CutPrefix(v, GroupPolicyPrefix)
	if !ok {
		return "", "", false, nil
	}
	name, uid, _ = strings.Cut(rest, "/")
	switch {
	case len(name) > 253 || !claimName.MatchString(name):
		return "", "", true, fmt.Errorf("%q: the claim name is not a Kubernetes object name", v)
	case uid == "" || len(uid) > 128 || strings.ContainsAny(uid, "/ "):
		return "", "", true, fmt.Errorf("%q: want %sNAME/UID", v, GroupPolicyPrefix)
	}
	return name, uid, true, nil
}

// InheritsGroupVNI reports whether a NIC claim whose configuration names
// policy takes the VNI of its pod's group claim: it does unless it names
// a scope of its own (pod, none, claim:NAME). "job" is the group's: a
// PodGroup is the job.
func InheritsGroupVNI(policy string) bool {
	return policy == "" || policy == "job"
}

// ErrNotAllocated is wrapped by GroupClaimOf's error when a claim of the
// pod is not allocated yet: a caller retries.
var ErrNotAllocated = errors.New("not allocated yet")

// ErrTwoGroupClaims is wrapped by GroupClaimOf's error when the pod names
// more than one group claim: no retry mends it.
var ErrTwoGroupClaims = errors.New("which VNI its NICs carry would be a guess; give its PodGroup one")

// Reader reads the objects GroupClaimOf needs: the agent from the API
// server, the controller's binding conditions a pod from the API server
// and claims from its watch.
type Reader interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
}

// GroupClaimOf returns the group claim of pod: the claim of the fabric's
// VNI device of driver that the pod names and that is reserved for the
// pod's PodGroup; nil when the pod is in no PodGroup or holds no such
// claim. skip is a claim of the pod not to read (the one being served).
// A pod holding two is an error: whose VNI its NIC claims carry would be
// a guess.
func GroupClaimOf(ctx context.Context, r Reader, driver string, pod ReservedPod, skip string) (*resourceapi.ResourceClaim, error) {
	p, err := r.GetPod(ctx, pod.Namespace, pod.Name)
	if err != nil {
		return nil, fmt.Errorf("read pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if pod.UID != "" && p.UID != types.UID(pod.UID) {
		return nil, fmt.Errorf("pod %s/%s is another pod now (UID %s, the claim's is %s)", pod.Namespace, pod.Name, p.UID, pod.UID)
	}
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return nil, nil
	}
	group := *p.Spec.SchedulingGroup.PodGroupName
	var found []*resourceapi.ResourceClaim
	for i := range p.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(p, &p.Spec.ResourceClaims[i])
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if name == nil || *name == skip {
			continue
		}
		c, err := r.GetClaim(ctx, pod.Namespace, *name)
		if err != nil {
			return nil, fmt.Errorf("read claim %s/%s of pod %s: %w", pod.Namespace, *name, pod.Name, err)
		}
		if c.Status.Allocation == nil {
			// The scheduler allocates all of a pod's claims before it
			// binds the pod, one write each: whose VNI is not known yet.
			return nil, fmt.Errorf("claim %s/%s of pod %s: %w", pod.Namespace, *name, pod.Name, ErrNotAllocated)
		}
		if ok, err := isGroupClaimOf(c, driver, group); err != nil {
			return nil, err
		} else if ok {
			found = append(found, c)
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, c := range found {
		names[i] = c.Name
	}
	return nil, fmt.Errorf("pod %s/%s holds %d claims of the fabric's VNI device (%s): %w",
		pod.Namespace, pod.Name, len(found), strings.Join(names, ", "), ErrTwoGroupClaims)
}

// isGroupClaimOf reports whether c is allocated the fabric's VNI device
// and reserved for PodGroup group.
func isGroupClaimOf(c *resourceapi.ResourceClaim, driver, group string) (bool, error) {
	ok, err := IsGroupVNI(c, driver)
	if !ok || err != nil {
		return false, err
	}
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == schedulingv1beta1.GroupName && r.Resource == "podgroups" && r.Name == group {
			return true, nil
		}
	}
	return false, nil
}
