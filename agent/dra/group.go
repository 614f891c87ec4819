package dra

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slingshot-k8s/slingshot/internal/draclaim"
)

// APIGroupClaims finds a pod's PodGroup claim of the fabric's VNI device
// (draclaim.GroupClaimOf) through the API server: one read of the pod and
// one of each other claim it names (APIClaims). The agent asks only with
// --dra-podgroup-claims, and only for a NIC claim it has not prepared.
type APIGroupClaims struct {
	APIClaims
	Driver string
}

// Of returns the group claim of pod, nil when it holds none; skip is the
// claim being prepared, not read again.
func (a APIGroupClaims) Of(ctx context.Context, pod PodRef, skip string) (*resourceapi.ResourceClaim, error) {
	return draclaim.GroupClaimOf(ctx, a, a.Driver, draclaim.ReservedPod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, skip)
}

// GetPod reads a pod (draclaim.Reader).
func (a APIGroupClaims) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return a.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}
