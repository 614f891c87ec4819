package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// VNIClaim's group, version and kind.
const (
	ClaimAPIVersion = "slingshot.hpe.com/v1alpha1"
	ClaimKind       = "VNIClaim"
)

// The DRA ResourceClaim's group, version and kind: the owner of a
// PodGroup claim's VNI (ModeResourceClaim).
const (
	ResourceClaimAPIVersion = "resource.k8s.io/v1"
	ResourceClaimKind       = "ResourceClaim"
)

// LeaseKey returns the key of a lease: "job/NS/UID", "pod/NS/UID" (or
// "pod/NS/NAME" when the UID is unknown) or "claim/NS/NAME".
func LeaseKey(scope store.Scope, o store.Owner) string {
	id := o.UID
	if scope == store.ScopeClaim || id == "" {
		id = o.Name
	}
	return string(scope) + "/" + o.Namespace + "/" + id
}

func validatePod(p PodRef) error {
	switch {
	case !validSubdomain(p.Namespace) || len(p.Namespace) > 63:
		return &FieldError{Field: "pod.namespace", Reason: fmt.Sprintf("%q is not a namespace name", p.Namespace)}
	case !validSubdomain(p.Name):
		return &FieldError{Field: "pod.name", Reason: fmt.Sprintf("%q is not a pod name", p.Name)}
	case len(p.UID) > 128:
		return &FieldError{Field: "pod.uid", Reason: "longer than 128 bytes"}
	}
	return nil
}

func validateNode(node string, required bool) error {
	if node == "" && !required {
		return nil
	}
	if !validSubdomain(node) {
		return &FieldError{Field: "node", Reason: fmt.Sprintf("%q is not a node name", node)}
	}
	return nil
}

func (l *lease) info() Lease {
	return Lease{Key: l.rec.Key, VNI: l.rec.VNI, Scope: l.rec.Scope, Owner: l.rec.Owner,
		Nodes: slices.Clone(l.rec.Nodes), OwnerGone: l.rec.OwnerGone, Created: l.rec.Created}
}

// AcquireJobVNI returns the VNI of the pod's job for a pod running on
// node, leasing one if the job has none, and records that node holds it.
// It is idempotent. Errors wrap ErrUnavailable, ErrInvalidArgument,
// ErrNotFound (no such pod or claim), ErrOwnerGone or ErrExhausted.
func (s *Allocator) AcquireJobVNI(ctx context.Context, pod PodRef, node string) (Lease, error) {
	return s.AcquireJobVNIWithPolicy(ctx, pod, node, "")
}

// AcquireJobVNIWithPolicy is AcquireJobVNI with the VNI scope named by the
// caller, as a DRA ResourceClaim's config names it: policy, in
// AnnotationVNI's grammar, replaces the policy of the pod's annotation
// (or its owner's); "" keeps the annotation's. Everything else is as for
// the annotation: "job" walks the pod's owners, "claim:NAME" needs the
// VNIClaim to exist, "pod" may come from the node's slice. The pod is
// still resolved (for its owner and network request), so a malformed
// annotation is still an error. A malformed policy is a *FieldError for
// the field "policy", as is a claim when the controller has no
// Kubernetes API.
func (s *Allocator) AcquireJobVNIWithPolicy(ctx context.Context, pod PodRef, node, policy string) (Lease, error) {
	start := time.Now()
	l, err := s.acquireJobVNI(ctx, pod, node, policy)
	s.m.observeAcquire("vni", time.Since(start), err)
	return l, err
}

func (s *Allocator) acquireJobVNI(ctx context.Context, pod PodRef, node, policy string) (Lease, error) {
	if err := validatePod(pod); err != nil {
		return Lease{}, err
	}
	if err := validateNode(node, true); err != nil {
		return Lease{}, err
	}
	var override *Policy
	if policy != "" {
		p, err := parseRequestPolicy(policy)
		if err != nil {
			return Lease{}, err
		}
		if (p.Mode == ModeClaim || p.Mode == ModeResourceClaim) && s.res == nil {
			// acquire would say so too, but would name the annotation.
			return Lease{}, &FieldError{Field: "policy", Reason: "claims need the Kubernetes API; the controller runs without one"}
		}
		override = &p
	}
	if !s.Ready() {
		return Lease{}, fmt.Errorf("%w: state is loading", ErrUnavailable)
	}
	res := Resolution{Pod: store.Owner{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Policy: Policy{Mode: ModePod}}
	if s.res != nil {
		var err error
		if res, err = s.res.ResolvePod(ctx, pod); err != nil {
			return Lease{}, fmt.Errorf("resolve pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	if override != nil {
		res.Policy = *override
	}
	l, err := s.leaseFor(ctx, pod, res, node)
	if err != nil {
		return Lease{}, err
	}
	l.NetworkRequest = res.NetworkRequest
	return l, nil
}

// leaseFor leases (or returns) the VNI that the resolved pod's policy
// gives it, recording that node holds it.
func (s *Allocator) leaseFor(ctx context.Context, pod PodRef, res Resolution, node string) (Lease, error) {
	scope, owner := ScopeNone, res.Pod
	switch res.Policy.Mode {
	case ModeNone:
		return Lease{Scope: ScopeNone}, nil
	case ModeClaim:
		scope = store.ScopeClaim
		owner = store.Owner{APIVersion: ClaimAPIVersion, Kind: ClaimKind, Namespace: pod.Namespace, Name: res.Policy.Claim}
	case ModeResourceClaim:
		scope = store.ScopeJob
		owner = store.Owner{APIVersion: ResourceClaimAPIVersion, Kind: ResourceClaimKind, Namespace: pod.Namespace,
			Name: res.Policy.Claim, UID: res.Policy.ClaimUID}
	case ModeJob, "":
		scope = store.ScopePod
		if res.Owner != nil {
			scope, owner = store.ScopeJob, *res.Owner
		}
	default:
		scope = store.ScopePod
	}
	if scope == store.ScopePod && !s.cfg.PodVNIRange.Empty() {
		return Lease{Key: LeaseKey(scope, owner), Scope: scope, Owner: owner, FromNodeSlice: true}, nil
	}
	return s.acquire(ctx, scope, owner, node)
}

// AcquireOwnerVNI leases (or returns) the VNI of an owner object without
// recording a node, as the Metacontroller sync hook does. policy is the
// owner's AnnotationVNI; ModeNone and ModePod lease nothing and return a
// Lease of ScopeNone. An owner of kind VNIClaim leases the claim's VNI.
func (s *Allocator) AcquireOwnerVNI(ctx context.Context, owner store.Owner, policy Policy) (Lease, error) {
	start := time.Now()
	scope := store.ScopeJob
	switch {
	case owner.APIVersion == ClaimAPIVersion && owner.Kind == ClaimKind:
		scope = store.ScopeClaim
	case policy.Mode == ModeNone || policy.Mode == ModePod:
		return Lease{Scope: ScopeNone}, nil
	case policy.Mode == ModeClaim:
		scope = store.ScopeClaim
		owner = store.Owner{APIVersion: ClaimAPIVersion, Kind: ClaimKind, Namespace: owner.Namespace, Name: policy.Claim}
	}
	l, err := s.acquire(ctx, scope, owner, "")
	s.m.observeAcquire("owner", time.Since(start), err)
	return l, err
}

func (s *Allocator) acquire(ctx context.Context, scope store.Scope, owner store.Owner, node string) (Lease, error) {
	l, err := s.acquireLease(ctx, scope, owner, node)
	if scope == store.ScopeClaim && s.cfg.Claims != nil {
		// After the commit: a status must never show a VNI the store
		// may not keep.
		if err == nil {
			s.cfg.Claims.Leased(claimRef(owner), l.VNI)
		} else if msg := claimFailure(err); msg != "" {
			s.cfg.Claims.Failed(claimRef(owner), msg)
		}
	}
	return l, err
}

func (s *Allocator) acquireLease(ctx context.Context, scope store.Scope, owner store.Owner, node string) (Lease, error) {
	key := LeaseKey(scope, owner)
	// A claim is checked before its first lease: a VNI is leased only for
	// one that exists (a ResourceClaim, with the UID the node read).
	isClaim := scope == store.ScopeClaim || (owner.APIVersion == ResourceClaimAPIVersion && owner.Kind == ResourceClaimKind)
	if isClaim && s.needClaimCheck(key) {
		if s.res == nil {
			return Lease{}, &FieldError{Field: "annotation " + AnnotationVNI, Reason: "claims need the Kubernetes API; the controller runs without one"}
		}
		ok, err := s.res.OwnerExists(ctx, owner)
		if err != nil {
			return Lease{}, fmt.Errorf("%w: look up %s %s/%s: %w", ErrUnavailable, owner.Kind, owner.Namespace, owner.Name, err)
		}
		if !ok {
			return Lease{}, fmt.Errorf("%w: %s %s/%s does not exist", ErrNotFound, owner.Kind, owner.Namespace, owner.Name)
		}
	}
	s.mu.Lock()
	if err := s.gate(); err != nil {
		s.mu.Unlock()
		return Lease{}, err
	}
	now := s.now()
	l := s.leases[key]
	var b *batch
	switch {
	case l == nil:
		if err := s.capLocked(owner.Namespace); err != nil {
			s.mu.Unlock()
			return Lease{}, err
		}
		ops := s.expireLocked(now)
		vni, err := s.alloc.Allocate()
		if err != nil {
			s.enqueue(ops...)
			s.mu.Unlock()
			return Lease{}, &ExhaustedError{Resource: "vni", Range: s.cfg.VNIRange.String(), Capacity: s.alloc.Capacity(), Err: err}
		}
		// The reservation's name is stored with the lease, before any
		// reservation is made (below, once this is stored).
		l = &lease{rec: store.Lease{Key: key, VNI: vni, Scope: scope, Owner: owner, Created: now, Version: 1,
			HWCollJob: s.hwcollIntent(scope, owner)}}
		if node != "" {
			l.rec.Nodes = []string{node}
		}
		s.leases[key] = l
		s.perNS[owner.Namespace]++
		rec := l.rec
		b = s.enqueue(append(ops, store.Put(&rec, 0))...)
		l.pending, l.made = b, b
	case l.rec.OwnerGone:
		s.mu.Unlock()
		return Lease{}, fmt.Errorf("%w: %s %s/%s is being deleted; its vni %d is draining", ErrOwnerGone, l.rec.Owner.Kind, l.rec.Owner.Namespace, l.rec.Owner.Name, l.rec.VNI)
	case node != "" && !slices.Contains(l.rec.Nodes, node):
		l.rec.Nodes = append(l.rec.Nodes, node)
		slices.Sort(l.rec.Nodes)
		b = s.putLocked(l)
	default:
		b = l.pending
	}
	if node != "" {
		s.acquired[hold{key, node}] = now
	}
	info := l.info()
	hwJob := l.rec.HWCollJob
	s.mu.Unlock()
	if err := s.wait(ctx, b); err != nil {
		return Lease{}, err
	}
	if hwJob != "" && node != "" && s.coll != nil {
		// A node's acquire is for pods about to start: they need the
		// reservation now. An owner's (the sync hook) leaves it to the
		// first node.
		c, err := s.coll.reserve(ctx, s, hwJob)
		if err != nil {
			return Lease{}, err
		}
		info.Collectives = c
	}
	return info, nil
}

// capLocked returns an ExhaustedError wrapping ErrNamespaceFull when
// namespace ns holds as many leases as Config.MaxLeasesPerNamespace
// allows; call with s.mu held.
func (s *Allocator) capLocked(ns string) error {
	limit := s.cfg.MaxLeasesPerNamespace
	if limit <= 0 || s.perNS[ns] < limit {
		return nil
	}
	return &ExhaustedError{Resource: "namespace", Range: ns, Capacity: limit,
		Err: fmt.Errorf("%w: namespace %s holds %d VNI leases, the most one namespace may hold (--max-leases-per-namespace=%d); end some of its jobs or raise the cap",
			ErrNamespaceFull, ns, s.perNS[ns], limit)}
}

func (s *Allocator) needClaimCheck(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases[key] == nil
}

// putLocked persists l's changed record.
func (s *Allocator) putLocked(l *lease) *batch {
	prev := l.rec.Version
	l.rec.Version++
	l.rec.Nodes = slices.Clone(l.rec.Nodes)
	rec := l.rec
	b := s.enqueue(store.Put(&rec, prev))
	l.pending = b
	return b
}

// freeLocked deletes l and puts its VNI into quarantine.
func (s *Allocator) freeLocked(l *lease, now time.Time) *batch {
	delete(s.leases, l.rec.Key)
	if l.rec.Scope == store.ScopeClaim && s.cfg.Claims != nil {
		s.cfg.Claims.Forget(claimRef(l.rec.Owner))
	}
	if s.perNS[l.rec.Owner.Namespace]--; s.perNS[l.rec.Owner.Namespace] <= 0 {
		delete(s.perNS, l.rec.Owner.Namespace)
	}
	s.alloc.Release(l.rec.VNI, now)
	rec := l.rec
	ops := []store.Op{store.Delete(&rec, rec.Version)}
	if s.alloc.Quarantined(l.rec.VNI) {
		q := store.Quarantine{VNI: l.rec.VNI, Released: now, Version: 1}
		s.quarantine[q.VNI] = q
		ops = append(ops, store.Put(&q, 0))
	} else {
		// No quarantine configured: the VNI is free at once.
		s.alloc.Expire(now)
	}
	s.m.freed.Inc()
	b := s.enqueue(ops...)
	if l.rec.HWCollJob != "" && s.coll != nil {
		s.coll.queueRelease(l.rec.HWCollJob, b)
	}
	return b
}

// expireLocked frees VNIs whose quarantine has ended and returns the ops
// that delete their records.
func (s *Allocator) expireLocked(now time.Time) []store.Op {
	var ops []store.Op
	for _, v := range s.alloc.Expire(now) {
		if q, ok := s.quarantine[v]; ok {
			ops = append(ops, store.Delete(&q, q.Version))
			delete(s.quarantine, v)
		}
	}
	return ops
}

// ReleaseJobVNI records that node no longer holds the lease key (a key
// from AcquireJobVNI). A pod-scoped lease is freed with its last node; a
// job or claim lease once its owner is gone too. Releasing what is not
// held succeeds. It returns the lease as it is now (VNI 0 once freed).
// Errors wrap ErrUnavailable or ErrInvalidArgument.
func (s *Allocator) ReleaseJobVNI(ctx context.Context, key, node string) (Lease, error) {
	if key == "" || len(key) > 512 {
		return Lease{}, &FieldError{Field: "key", Reason: "empty or longer than 512 bytes"}
	}
	if err := validateNode(node, true); err != nil {
		return Lease{}, err
	}
	s.mu.Lock()
	if err := s.gate(); err != nil {
		s.mu.Unlock()
		return Lease{}, err
	}
	l := s.leases[key]
	if l == nil {
		s.mu.Unlock()
		return Lease{Key: key}, nil
	}
	var b *batch
	i := slices.Index(l.rec.Nodes, node)
	if i >= 0 {
		l.rec.Nodes = slices.Delete(slices.Clone(l.rec.Nodes), i, i+1)
		if l.rec.Scope == store.ScopePod && len(l.rec.Nodes) == 0 {
			// A pod runs on one node: its release is the pod's end.
			l.rec.OwnerGone = true
		}
		b = s.putLocked(l)
	} else {
		b = l.pending
	}
	info := l.info()
	if l.rec.OwnerGone && len(l.rec.Nodes) == 0 {
		b = s.freeLocked(l, s.now())
		info.VNI = 0
	}
	s.mu.Unlock()
	return info, s.wait(ctx, b)
}

// FinalizeOwner is the Metacontroller finalize step for an owner object
// (or a VNIClaim). When deleting, it marks the lease's owner gone and
// frees the VNI if no node holds it; done reports whether the VNI is
// released. An object that merely stopped matching (not deleting) keeps
// its VNI for its pods and reports done. Errors wrap ErrUnavailable.
func (s *Allocator) FinalizeOwner(ctx context.Context, owner store.Owner, deleting bool) (l Lease, done bool, err error) {
	scope := store.ScopeJob
	if owner.APIVersion == ClaimAPIVersion && owner.Kind == ClaimKind {
		scope = store.ScopeClaim
	}
	key := LeaseKey(scope, owner)
	s.mu.Lock()
	if err := s.gate(); err != nil {
		s.mu.Unlock()
		return Lease{}, false, err
	}
	cur := s.leases[key]
	if cur == nil || !deleting {
		var b *batch
		if cur != nil {
			l, b = cur.info(), cur.pending
		}
		s.mu.Unlock()
		return l, true, s.wait(ctx, b)
	}
	var b *batch
	if !cur.rec.OwnerGone {
		cur.rec.OwnerGone = true
		b = s.putLocked(cur)
	}
	l = cur.info()
	if len(cur.rec.Nodes) == 0 {
		b = s.freeLocked(cur, s.now())
		done = true
	}
	s.mu.Unlock()
	return l, done, s.wait(ctx, b)
}

// Quarantined is a freed VNI waiting for reuse.
type Quarantined struct {
	VNI      uint16
	Released time.Time
}

// ListLeases returns every lease ordered by key and the quarantined VNIs.
// It returns an error wrapping ErrUnavailable before the state is loaded.
func (s *Allocator) ListLeases() ([]Lease, []Quarantined, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.gate(); err != nil {
		return nil, nil, err
	}
	out := make([]Lease, 0, len(s.leases))
	for _, l := range s.leases {
		out = append(out, l.info())
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmpString(a.Key, b.Key) })
	q := make([]Quarantined, 0, len(s.quarantine))
	for v, rec := range s.quarantine {
		q = append(q, Quarantined{VNI: v, Released: rec.Released})
	}
	slices.SortFunc(q, func(a, b Quarantined) int { return int(a.VNI) - int(b.VNI) })
	return out, q, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RangeInfo describes the job VNI range for inspection.
type RangeInfo struct {
	Range, PodRange vnialloc.Range
	Capacity        int
	Leased          int
	Quarantined     int
}

// VNIRange returns the range's fill; errors wrap ErrUnavailable.
func (s *Allocator) VNIRange() (RangeInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.gate(); err != nil {
		return RangeInfo{}, err
	}
	return RangeInfo{Range: s.cfg.VNIRange, PodRange: s.cfg.PodVNIRange, Capacity: s.alloc.Capacity(),
		Leased: s.alloc.Leased(), Quarantined: s.alloc.InQuarantine()}, nil
}
