package controller

import (
	"errors"
	"path/filepath"
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
