package owner

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ErrBadKind is wrapped by ParseKinds errors.
var ErrBadKind = errors.New("bad owner kind")

// Kind is an owner kind the resolver follows, with the resource name the
// API serves it under.
type Kind struct {
	Group, Version, Kind, Resource string
}

// DefaultKinds are the job-like kinds a VNI is keyed by.
var DefaultKinds = []Kind{
	{"apps", "v1", "ReplicaSet", "replicasets"},
	{"apps", "v1", "Deployment", "deployments"},
	{"apps", "v1", "StatefulSet", "statefulsets"},
	{"batch", "v1", "Job", "jobs"},
	{"jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"},
	{"kubeflow.org", "v2beta1", "MPIJob", "mpijobs"},
	{"batch.volcano.sh", "v1alpha1", "Job", "jobs"},
	{"leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets"},
}

// ClaimKind is the VNIClaim kind; the resolver always knows it.
var ClaimKind = Kind{"slingshot.hpe.com", "v1alpha1", "VNIClaim", "vniclaims"}

// ResourceClaimKind is the DRA ResourceClaim, the owner of a PodGroup
// claim's VNI (controller.ModeResourceClaim); the resolver always knows
// it, and never walks a pod's owners up through it.
var ResourceClaimKind = Kind{"resource.k8s.io", "v1", "ResourceClaim", "resourceclaims"}

// String formats k as ParseKinds reads it: "group/version/Kind=resource"
// ("version/Kind=resource" for the core group).
func (k Kind) String() string {
	gv := k.Version
	if k.Group != "" {
		gv = k.Group + "/" + k.Version
	}
	return gv + "/" + k.Kind + "=" + k.Resource
}

func (k Kind) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: k.Group, Version: k.Version, Resource: k.Resource}
}

// ParseKinds parses a comma-separated list of Kind strings, such as
// "apps/v1/Deployment=deployments,batch/v1/Job=jobs". Errors wrap
// ErrBadKind.
func ParseKinds(s string) ([]Kind, error) {
	var out []Kind
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		path, resource, ok := strings.Cut(item, "=")
		parts := strings.Split(path, "/")
		if !ok || resource == "" || len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("%w %q: want group/version/Kind=resource", ErrBadKind, item)
		}
		k := Kind{Resource: resource}
		if len(parts) == 3 {
			k.Group, k.Version, k.Kind = parts[0], parts[1], parts[2]
		} else {
			k.Version, k.Kind = parts[0], parts[1]
		}
		if k.Version == "" || k.Kind == "" {
			return nil, fmt.Errorf("%w %q: empty version or kind", ErrBadKind, item)
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty list", ErrBadKind)
	}
	return out, nil
}

// FormatKinds formats kinds as ParseKinds reads them.
func FormatKinds(kinds []Kind) string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = k.String()
	}
	return strings.Join(s, ",")
}
