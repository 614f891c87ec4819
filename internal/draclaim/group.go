package draclaim

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
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
