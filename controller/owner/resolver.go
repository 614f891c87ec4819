package owner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
//
// ResolvePod reads from the API server's watch cache (resourceVersion
// "0": no etcd read, no quorum) wherever the object's identity is then
// checked, and keeps owner objects by UID for a short while, so that a
// gang start of one job costs one read per pod and about one per owner
// rather than one per pod and level. A watch-cache read may lag etcd by
// moments; that is safe here because a stale answer can only be missing
// an object that was just created, or hold an older version of the object
// of the UID asked for. The first is confirmed with a quorum read before
// anything is concluded from it (a pod is reported missing, or a chain
// ends at a gone owner, only on etcd's word), and the second differs at
// most in metadata that changed within that lag: the pod's or owner's
// annotations, or a controller reference changed by orphaning and
// adoption, which no resolution could order against the acquire anyway.
// OwnerExists and Lookup, whose "gone" frees a VNI or acts on a hook,
// always read with quorum.
type Resolver struct {
	md    metadata.Interface
	kinds map[schema.GroupKind]Kind
	cache *ownerCache
	// podReads admits pod reads, podReads' capacity at a time, in the
	// order they came (a channel's senders wait in a queue). Thousands
	// of reads sent at once share the API server's CPU and all finish
	// late, past their callers' deadlines, and their retries do the
	// same again; taken in turn, the first are answered at once and a
	// caller whose deadline passed while it waited never sends its read.
	// Owner reads, a few per job, do not queue behind the pods': every
	// pod of the job waits on them.
	podReads chan struct{}
}

var _ controller.Resolver = (*Resolver)(nil)

// Option configures a Resolver.
type Option func(*resolverOptions)

type resolverOptions struct {
	ttl      time.Duration
	size     int
	now      func() time.Time
	podReads int
}

// DefaultPodReads is how many pod reads a Resolver has in flight at once.
// A watch-cache read takes the API server well under a millisecond, so
// this many keep it as busy as the client's rate limit allows.
const DefaultPodReads = 64

// WithPodReads sets how many pod reads are in flight at once (at least 1).
func WithPodReads(n int) Option {
	return func(o *resolverOptions) { o.podReads = max(n, 1) }
}

// WithOwnerCache sets how long owner metadata is reused (0: not at all;
// concurrent reads of one owner are still shared) and how many owners are
// held at once. The defaults are DefaultOwnerTTL and
// DefaultOwnerCacheSize.
func WithOwnerCache(ttl time.Duration, size int) Option {
	return func(o *resolverOptions) { o.ttl, o.size = ttl, max(size, 1) }
}

// WithClock sets the clock the owner cache expires entries by.
func WithClock(now func() time.Time) Option {
	return func(o *resolverOptions) { o.now = now }
}

// NewResolver returns a resolver that follows kinds (plus ClaimKind and
// ResourceClaimKind).
func NewResolver(md metadata.Interface, kinds []Kind, opts ...Option) *Resolver {
	o := resolverOptions{ttl: DefaultOwnerTTL, size: DefaultOwnerCacheSize, now: time.Now, podReads: DefaultPodReads}
	for _, opt := range opts {
		opt(&o)
	}
	r := &Resolver{md: md, kinds: map[schema.GroupKind]Kind{}, cache: newOwnerCache(o.ttl, o.size, o.now),
		podReads: make(chan struct{}, o.podReads)}
	for _, k := range append(kinds, ClaimKind, ResourceClaimKind) {
		r.kinds[schema.GroupKind{Group: k.Group, Kind: k.Kind}] = k
	}
	return r
}

// watchCache reads from the API server's watch cache: any version at
// least as new as the cache's, without a round trip to etcd.
var watchCache = metav1.GetOptions{ResourceVersion: "0"}

func (r *Resolver) get(ctx context.Context, k Kind, ns, name string) (*metav1.PartialObjectMetadata, error) {
	return r.md.Resource(k.gvr()).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

// getUID reads the object of resource gvr, namespace and name that has
// UID uid: from the watch cache, then, where that has no such object
// (missing, or another UID under the name), with quorum, so that only
// etcd's answer says it is gone. It returns nil, nil when it is.
func (r *Resolver) getUID(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, uid types.UID) (*metav1.PartialObjectMetadata, error) {
	c := r.md.Resource(gvr).Namespace(ns)
	obj, err := c.Get(ctx, name, watchCache)
	if err == nil && obj.UID == uid {
		return obj, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	obj, err = c.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case obj.UID != uid:
		return nil, nil
	}
	return obj, nil
}

// getPod reads the pod: by its UID, from the watch cache as getUID does,
// when the caller knows it; else with quorum, since nothing could tell a
// stale pod from a re-created one of the same name (a StatefulSet's).
// It returns nil, nil when there is no such pod.
func (r *Resolver) getPod(ctx context.Context, p controller.PodRef) (*metav1.PartialObjectMetadata, error) {
	select {
	case r.podReads <- struct{}{}:
		defer func() { <-r.podReads }()
	case <-ctx.Done():
		return nil, fmt.Errorf("wait to read pod %s/%s: %w", p.Namespace, p.Name, context.Cause(ctx))
	}
	if p.UID != "" {
		return r.getUID(ctx, podsGVR, p.Namespace, p.Name, types.UID(p.UID))
	}
	pod, err := r.md.Resource(podsGVR).Namespace(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pod, err
}

// getOwner returns the owner ref names, of kind k, in namespace ns:
// shared and cached by its UID (see ownerCache), nil when it is gone.
func (r *Resolver) getOwner(ctx context.Context, k Kind, ns string, ref *metav1.OwnerReference) (*metav1.PartialObjectMetadata, error) {
	gvr := k.gvr()
	n := objectName{group: gvr.Group, resource: gvr.Resource, namespace: ns, name: ref.Name}
	return r.cache.get(ctx, n, ref.UID, func(ctx context.Context) (*metav1.PartialObjectMetadata, error) {
		return r.getUID(ctx, gvr, ns, ref.Name, ref.UID)
	})
}

// ResolvePod implements controller.Resolver. The network request is the
// pod's own AnnotationNetwork, as it is (an owner's is not consulted: the
// request is per pod). It returns an error wrapping controller.ErrNotFound
// when the pod does not exist (or has another UID), a
// *controller.FieldError for a malformed AnnotationVNI, and the API's
// error otherwise.
func (r *Resolver) ResolvePod(ctx context.Context, p controller.PodRef) (controller.Resolution, error) {
	pod, err := r.getPod(ctx, p)
	if err != nil {
		return controller.Resolution{}, fmt.Errorf("%w: get pod: %w", controller.ErrUnavailable, err)
	}
	if pod == nil {
		return controller.Resolution{}, fmt.Errorf("%w: pod %s/%s", controller.ErrNotFound, p.Namespace, p.Name)
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
		if !ok || k == ClaimKind || k == ResourceClaimKind {
			break
		}
		res.Owner = &store.Owner{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: pod.Namespace, Name: ref.Name, UID: string(ref.UID)}
		k.Version = gv.Version
		obj, err := r.getOwner(ctx, k, pod.Namespace, ref)
		if err != nil {
			return controller.Resolution{}, fmt.Errorf("%w: get %s %s/%s: %w", controller.ErrUnavailable, ref.Kind, pod.Namespace, ref.Name, err)
		}
		if obj == nil {
			// The owner is gone (the pod is being collected): key by the
			// reference; the sweep frees the VNI once no node holds it.
			break
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
	if err != nil {
		return false, err
	}
	exists := obj != nil && (o.UID == "" || string(obj.UID) == o.UID)
	if !exists && o.UID != "" {
		// A quorum read says it is gone: its cached metadata must not
		// keep resolving pods up through it.
		r.cache.forget(types.UID(o.UID))
	}
	return exists, nil
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
