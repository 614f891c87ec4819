package owner

import (
	"context"
	"errors"
	"fmt"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
)

// ErrNotFollowed is wrapped when an object's kind is not among the
// resolver's kinds.
var ErrNotFollowed = errors.New("owner kind is not followed")

// maxDepth bounds the owner walk.
const maxDepth = 8

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// Resolver implements controller.Resolver over the metadata API. It is
// safe for concurrent use.
type Resolver struct {
	md    metadata.Interface
	kinds map[schema.GroupKind]Kind
}

var _ controller.Resolver = (*Resolver)(nil)

// NewResolver returns a resolver that follows kinds (plus ClaimKind).
func NewResolver(md metadata.Interface, kinds []Kind) *Resolver {
	r := &Resolver{md: md, kinds: map[schema.GroupKind]Kind{}}
	for _, k := range append(kinds, ClaimKind) {
		r.kinds[schema.GroupKind{Group: k.Group, Kind: k.Kind}] = k
	}
	return r
}

func (r *Resolver) get(ctx context.Context, k Kind, ns, name string) (*metav1.PartialObjectMetadata, error) {
	return r.md.Resource(k.gvr()).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

// ResolvePod implements controller.Resolver. The network request is the
// pod's own AnnotationNetwork, as it is (an owner's is not consulted: the
// request is per pod). It returns an error wrapping controller.ErrNotFound
// when the pod does not exist (or has another UID), a
// *controller.FieldError for a malformed AnnotationVNI, and the API's
// error otherwise.
func (r *Resolver) ResolvePod(ctx context.Context, p controller.PodRef) (controller.Resolution, error) {
	pod, err := r.md.Resource(podsGVR).Namespace(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && p.UID != "" && string(pod.UID) != p.UID) {
		return controller.Resolution{}, fmt.Errorf("%w: pod %s/%s", controller.ErrNotFound, p.Namespace, p.Name)
	}
	if err != nil {
		return controller.Resolution{}, fmt.Errorf("%w: get pod: %w", controller.ErrUnavailable, err)
	}
	res := controller.Resolution{Pod: store.Owner{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)},
		NetworkRequest: pod.Annotations[controller.AnnotationNetwork]}
	annotation, annotated := pod.Annotations[controller.AnnotationVNI]
	cur := &pod.ObjectMeta
	for range maxDepth {
		ref := metav1.GetControllerOfNoCopy(cur)
		if ref == nil {
			break
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			break
		}
		k, ok := r.kinds[schema.GroupKind{Group: gv.Group, Kind: ref.Kind}]
		if !ok || k == ClaimKind {
			break
		}
		res.Owner = &store.Owner{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: pod.Namespace, Name: ref.Name, UID: string(ref.UID)}
		k.Version = gv.Version
		obj, err := r.get(ctx, k, pod.Namespace, ref.Name)
		if apierrors.IsNotFound(err) || (err == nil && obj.UID != ref.UID) {
			// The owner is gone (the pod is being collected): key by the
			// reference; the sweep frees the VNI once no node holds it.
			break
		}
		if err != nil {
			return controller.Resolution{}, fmt.Errorf("%w: get %s %s/%s: %w", controller.ErrUnavailable, ref.Kind, pod.Namespace, ref.Name, err)
		}
		if v, ok := obj.Annotations[controller.AnnotationVNI]; ok && !annotated {
			annotation, annotated = v, true
		}
		cur = &obj.ObjectMeta
	}
	if res.Policy, err = controller.ParsePolicy(annotation); err != nil {
		return controller.Resolution{}, err
	}
	return res, nil
}

// OwnerExists implements controller.Resolver: it reports whether the
// object exists and, when o.UID is set, has that UID. Kinds outside the
// list report an error wrapping ErrNotFollowed.
func (r *Resolver) OwnerExists(ctx context.Context, o store.Owner) (bool, error) {
	obj, err := r.Lookup(ctx, o)
	if err != nil || obj == nil {
		return false, err
	}
	return o.UID == "" || string(obj.UID) == o.UID, nil
}

// Lookup returns the metadata the API server holds now (a quorum read, not
// a cache) for the object of o's kind, namespace and name, whatever its
// UID, and nil when there is none: the hooks confirm their request bodies
// with it. Kinds outside the list report an error wrapping
// ErrNotFollowed; a failed read, the API's error.
func (r *Resolver) Lookup(ctx context.Context, o store.Owner) (*metav1.PartialObjectMetadata, error) {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("owner %s: %w", o.APIVersion, err)
	}
	k, ok := r.kinds[schema.GroupKind{Group: gv.Group, Kind: o.Kind}]
	if !ok {
		return nil, fmt.Errorf("%w: %s/%s", ErrNotFollowed, gv.Group, o.Kind)
	}
	k.Version = gv.Version
	obj, err := r.get(ctx, k, o.Namespace, o.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
	}
	return obj, nil
}
