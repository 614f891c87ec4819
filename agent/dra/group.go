package dra

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/slingshot-k8s/slingshot/internal/draclaim"
)

// APIGroupClaims finds a pod's PodGroup claim of the fabric's VNI device
// (package draclaim) through the API server: one read of the pod and one
// of each other claim it names. The agent asks only with
// --dra-podgroup-claims, and only for a NIC claim it has not prepared.
type APIGroupClaims struct {
	Client kubernetes.Interface
	Driver string
}

// Of returns the group claim of pod, nil when the pod is in no PodGroup
// or holds no such claim of its group; skip is the claim being prepared,
// not read again. A pod holding two is an error: whose VNI its NIC claims
// carry would be a guess.
func (a APIGroupClaims) Of(ctx context.Context, pod PodRef, skip string) (*resourceapi.ResourceClaim, error) {
	p, err := a.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
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
		c, err := a.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("read claim %s/%s of pod %s: %w", pod.Namespace, *name, pod.Name, err)
		}
		if ok, err := isGroupClaimOf(c, a.Driver, group); err != nil {
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
	return nil, fmt.Errorf("pod %s/%s holds %d claims of the fabric's VNI device (%s): which VNI its NICs carry would be a guess; give its PodGroup one",
		pod.Namespace, pod.Name, len(found), strings.Join(names, ", "))
}

// isGroupClaimOf reports whether c is allocated the fabric's VNI device
// and reserved for PodGroup group.
func isGroupClaimOf(c *resourceapi.ResourceClaim, driver, group string) (bool, error) {
	ok, err := draclaim.IsGroupVNI(c, driver)
	if !ok || err != nil {
		return false, err
	}
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "scheduling.k8s.io" && r.Resource == "podgroups" && r.Name == group {
			return true, nil
		}
	}
	return false, nil
}
