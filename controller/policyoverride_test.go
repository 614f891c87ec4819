package controller

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// A request's policy replaces the annotation's; the rest of the path
// (owner walk, claim check, node slices) is the annotation's.
func TestAcquireJobVNIWithPolicy(t *testing.T) {
	podRange := Config{PodVNIRange: vnialloc.Range{Min: 2048, Max: 2175}, PodVNISliceSize: 64}
	tests := []struct {
		name   string
		cfg    Config
		noAPI  bool   // no resolver, as the embedded controller
		pod    string // "annotated-pod" (job j, annotation "pod"), "annotated-none" (job j, "none") or "bare" (no owner, no annotation)
		policy string
		// want, unless wantErr is set
		scope         store.Scope
		key           string
		fromNodeSlice bool
		wantErr       error
		wantField     string // of the *FieldError, when there is one
	}{
		{name: "empty keeps the annotation", pod: "annotated-pod", scope: store.ScopePod, key: "pod/a/pod-annotated-pod"},
		{name: "job over pod annotation", pod: "annotated-pod", policy: "job", scope: store.ScopeJob, key: "job/a/uid-j"},
		{name: "job over none annotation", pod: "annotated-none", policy: "job", scope: store.ScopeJob, key: "job/a/uid-j"},
		{name: "job without owner is pod-scoped", pod: "bare", policy: "job", scope: store.ScopePod, key: "pod/a/pod-bare"},
		{name: "pod", pod: "annotated-none", policy: "pod", scope: store.ScopePod, key: "pod/a/pod-annotated-none"},
		{name: "pod from node slice", cfg: podRange, pod: "annotated-none", policy: "pod", scope: store.ScopePod,
			key: "pod/a/pod-annotated-none", fromNodeSlice: true},
		{name: "none", pod: "annotated-pod", policy: "none", scope: ScopeNone},
		{name: "claim that exists", pod: "annotated-pod", policy: "claim:shared", scope: store.ScopeClaim, key: "claim/a/shared"},
		{name: "claim that does not exist", pod: "annotated-pod", policy: "claim:missing", wantErr: ErrNotFound},
		{name: "group claim: the job's VNI, owned by the claim", pod: "annotated-pod", policy: "resourceclaim:group/rc-uid",
			scope: store.ScopeJob, key: "job/a/rc-uid"},
		{name: "group claim over a pod VNI range", cfg: podRange, pod: "annotated-none", policy: "resourceclaim:group/rc-uid",
			scope: store.ScopeJob, key: "job/a/rc-uid"},
		{name: "group claim that does not exist", pod: "annotated-pod", policy: "resourceclaim:missing/u", wantErr: ErrNotFound},
		{name: "malformed group claim", pod: "annotated-pod", policy: "resourceclaim:group", wantErr: ErrInvalidArgument, wantField: "policy"},
		{name: "no API: group claim", noAPI: true, pod: "bare", policy: "resourceclaim:group/u", wantErr: ErrInvalidArgument, wantField: "policy"},
		{name: "malformed", pod: "annotated-pod", policy: "everyone", wantErr: ErrInvalidArgument, wantField: "policy"},
		{name: "malformed claim name", pod: "annotated-pod", policy: "claim:Not_A_Name", wantErr: ErrInvalidArgument, wantField: "policy"},
		{name: "malformed before the pod is looked up", pod: "ghost", policy: "claim:", wantErr: ErrInvalidArgument, wantField: "policy"},
		{name: "unknown pod", pod: "ghost", policy: "pod", wantErr: ErrNotFound},
		{name: "no API: job is pod-scoped", noAPI: true, pod: "bare", policy: "job", scope: store.ScopePod, key: "pod/a/bare"},
		{name: "no API: none", noAPI: true, pod: "bare", policy: "none", scope: ScopeNone},
		{name: "no API: claim", noAPI: true, pod: "bare", policy: "claim:shared", wantErr: ErrInvalidArgument, wantField: "policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res Resolver
			if !tt.noAPI {
				r := newFakeResolver()
				r.addPod("a", "annotated-pod", job("a", "j"), "pod")
				r.addPod("a", "annotated-none", job("a", "j"), "none")
				r.addPod("a", "bare", nil, "")
				r.setExists("a", "shared", true)
				r.setExists("a", "group", true)
				res = r
			}
			svc, _ := start(t, filepath.Join(t.TempDir(), "c.db"), res, tt.cfg)
			l, err := svc.AcquireJobVNIWithPolicy(t.Context(), PodRef{Namespace: "a", Name: tt.pod}, "n1", tt.policy)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				var fe *FieldError
				if tt.wantField != "" && (!errors.As(err, &fe) || fe.Field != tt.wantField) {
					t.Fatalf("err = %v, want a *FieldError for %q", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Scope != tt.scope || l.Key != tt.key || l.FromNodeSlice != tt.fromNodeSlice {
				t.Fatalf("lease %+v, want scope %q key %q from node slice %v", l, tt.scope, tt.key, tt.fromNodeSlice)
			}
			wantVNI := tt.scope != ScopeNone && !tt.fromNodeSlice
			if (l.VNI != 0) != wantVNI {
				t.Fatalf("vni %d, want one: %v", l.VNI, wantVNI)
			}
		})
	}
}

// TestGroupClaimLease: the pods of a PodGroup, on two nodes and under two
// owners, share the VNI of their group's ResourceClaim, held by both
// nodes; the lease outlives its nodes' holds while the claim exists, and
// the sweep frees it once the claim is gone. A pod's annotation cannot
// name a ResourceClaim.
func TestGroupClaimLease(t *testing.T) {
	ctx := t.Context()
	res := newFakeResolver()
	res.addPod("a", "w-0", job("a", "j"), "")
	res.addPod("a", "w-1", nil, "pod")
	res.setExists("a", "group", true)
	svc, _ := start(t, filepath.Join(t.TempDir(), "c.db"), res, Config{})
	const policy = "resourceclaim:group/rc-uid"
	l0, err := svc.AcquireJobVNIWithPolicy(ctx, PodRef{Namespace: "a", Name: "w-0"}, "n1", policy)
	if err != nil {
		t.Fatal(err)
	}
	l1, err := svc.AcquireJobVNIWithPolicy(ctx, PodRef{Namespace: "a", Name: "w-1"}, "n2", policy)
	if err != nil {
		t.Fatal(err)
	}
	wantOwner := store.Owner{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim", Namespace: "a", Name: "group", UID: "rc-uid"}
	if l0.VNI == 0 || l1.VNI != l0.VNI || l1.Key != "job/a/rc-uid" || l1.Owner != wantOwner || !slices.Equal(l1.Nodes, []string{"n1", "n2"}) {
		t.Fatalf("leases %+v and %+v: want one VNI, owned by %+v, held by n1 and n2", l0, l1, wantOwner)
	}
	other, err := svc.AcquireJobVNIWithPolicy(ctx, PodRef{Namespace: "a", Name: "w-0"}, "n1", "job")
	if err != nil || other.VNI == l0.VNI {
		t.Fatalf("the pod's own job: lease %+v, %v; want a VNI other than the group's %d", other, err, l0.VNI)
	}
	for _, n := range []string{"n1", "n2"} {
		if _, err := svc.ReleaseJobVNI(ctx, l0.Key, n); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := svc.sweep(ctx); err != nil || r.Freed != 0 {
		t.Fatalf("sweep with the claim still there: %+v, %v; want nothing freed", r, err)
	}
	res.setExists("a", "group", false)
	if r, err := svc.sweep(ctx); err != nil || r.Freed != 1 {
		t.Fatalf("sweep with the claim gone: %+v, %v; want its lease freed", r, err)
	}
	if _, err := ParsePolicy(policy); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("annotation %q: err %v, want it refused", policy, err)
	}
}
