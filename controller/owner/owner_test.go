package owner

import (
	"errors"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
)

func obj(apiVersion, kind, ns, name, uid string, owner *metav1.PartialObjectMetadata, annotations map[string]string) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Annotations: annotations},
	}
	if owner != nil {
		yes := true
		o.OwnerReferences = []metav1.OwnerReference{{APIVersion: owner.APIVersion, Kind: owner.Kind, Name: owner.Name, UID: owner.UID, Controller: &yes}}
	}
	return o
}

func newFake(t *testing.T, objs ...runtime.Object) *Resolver {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return NewResolver(metadatafake.NewSimpleMetadataClient(scheme, objs...), DefaultKinds)
}

func TestResolvePod(t *testing.T) {
	deploy := obj("apps/v1", "Deployment", "ml", "web", "d-1", nil, nil)
	rs := obj("apps/v1", "ReplicaSet", "ml", "web-abc", "rs-1", deploy, nil)
	js := obj("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "train", "js-1", nil, map[string]string{controller.AnnotationVNI: "claim:shared",
		controller.AnnotationNetwork: "owner's, not the pod's"})
	jsJob := obj("batch/v1", "Job", "ml", "train-w-0", "j-1", js, nil)
	ds := obj("apps/v1", "DaemonSet", "ml", "agent", "ds-1", nil, nil)
	vcjob := obj("batch.volcano.sh/v1alpha1", "Job", "ml", "vc", "vc-1", nil, nil)
	goneJob := obj("batch/v1", "Job", "ml", "gone", "g-1", nil, nil)
	groupClaim := obj("resource.k8s.io/v1", "ResourceClaim", "ml", "train-vni", "rc-1", nil, nil)
	objs := []runtime.Object{deploy, rs, js, jsJob, ds, vcjob, groupClaim,
		obj("v1", "Pod", "ml", "web-abc-1", "p-1", rs, nil),
		obj("v1", "Pod", "ml", "train-w-0-0", "p-2", jsJob, nil),
		obj("v1", "Pod", "ml", "train-w-0-1", "p-3", jsJob, map[string]string{controller.AnnotationVNI: "pod", controller.AnnotationNetwork: `{"pool":"hsn0"}`}),
		obj("v1", "Pod", "ml", "agent-x", "p-4", ds, nil),
		obj("v1", "Pod", "ml", "bare", "p-5", nil, map[string]string{controller.AnnotationNetwork: " hsn0 , ip=10.150.0.9 "}),
		obj("v1", "Pod", "ml", "vc-0", "p-6", vcjob, nil),
		obj("v1", "Pod", "ml", "orphan", "p-7", goneJob, nil),
		obj("v1", "Pod", "ml", "bad", "p-8", nil, map[string]string{controller.AnnotationVNI: "sometimes"}),
	}
	r := newFake(t, objs...)
	tests := []struct {
		pod       string
		ownerUID  string
		ownerKind string
		mode      controller.Mode
		// network: the pod's network request, passed on unparsed.
		network string
	}{
		{"web-abc-1", "d-1", "Deployment", controller.ModeJob, ""},
		{"train-w-0-0", "js-1", "JobSet", controller.ModeClaim, ""},
		{"train-w-0-1", "js-1", "JobSet", controller.ModePod, `{"pool":"hsn0"}`},
		{"agent-x", "", "", controller.ModeJob, ""},
		{"bare", "", "", controller.ModeJob, " hsn0 , ip=10.150.0.9 "},
		{"vc-0", "vc-1", "Job", controller.ModeJob, ""},
		{"orphan", "g-1", "Job", controller.ModeJob, ""},
	}
	for _, tt := range tests {
		res, err := r.ResolvePod(t.Context(), controller.PodRef{Namespace: "ml", Name: tt.pod})
		if err != nil {
			t.Fatalf("%s: %v", tt.pod, err)
		}
		gotUID, gotKind := "", ""
		if res.Owner != nil {
			gotUID, gotKind = res.Owner.UID, res.Owner.Kind
		}
		if gotUID != tt.ownerUID || gotKind != tt.ownerKind || res.Policy.Mode != tt.mode {
			t.Errorf("%s: owner %s %s mode %s; want %s %s %s", tt.pod, gotKind, gotUID, res.Policy.Mode, tt.ownerKind, tt.ownerUID, tt.mode)
		}
		if res.NetworkRequest != tt.network {
			t.Errorf("%s: network request %q, want %q", tt.pod, res.NetworkRequest, tt.network)
		}
	}
	if _, err := r.ResolvePod(t.Context(), controller.PodRef{Namespace: "ml", Name: "nope"}); !errors.Is(err, controller.ErrNotFound) {
		t.Errorf("missing pod: %v", err)
	}
	if _, err := r.ResolvePod(t.Context(), controller.PodRef{Namespace: "ml", Name: "bare", UID: "other"}); !errors.Is(err, controller.ErrNotFound) {
		t.Errorf("pod with other uid: %v", err)
	}
	if _, err := r.ResolvePod(t.Context(), controller.PodRef{Namespace: "ml", Name: "bad"}); !errors.Is(err, controller.ErrInvalidArgument) {
		t.Errorf("bad annotation: %v", err)
	}
	for _, tt := range []struct {
		apiVersion, kind, name, uid string
		want                        bool
	}{
		{"apps/v1", "Deployment", "web", "d-1", true},
		{"apps/v1", "Deployment", "web", "d-2", false},
		{"apps/v1", "Deployment", "nope", "", false},
		{"slingshot.hpe.com/v1alpha1", "VNIClaim", "shared", "", false},
		// A PodGroup claim's VNI is owned by its ResourceClaim, by UID.
		{"resource.k8s.io/v1", "ResourceClaim", "train-vni", "rc-1", true},
		{"resource.k8s.io/v1", "ResourceClaim", "train-vni", "rc-0", false},
		{"resource.k8s.io/v1", "ResourceClaim", "gone", "rc-2", false},
	} {
		got, err := r.OwnerExists(t.Context(), controllerOwner(tt.apiVersion, tt.kind, tt.name, tt.uid))
		if err != nil || got != tt.want {
			t.Errorf("OwnerExists(%s %s %s) = %v, %v", tt.kind, tt.name, tt.uid, got, err)
		}
	}
}

func TestParseKinds(t *testing.T) {
	got, err := ParseKinds(FormatKinds(DefaultKinds))
	if err != nil || len(got) != len(DefaultKinds) || got[6] != DefaultKinds[6] {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if k, err := ParseKinds("v1/Pod=pods"); err != nil || k[0].Group != "" || k[0].Kind != "Pod" {
		t.Fatalf("core kind: %v %v", k, err)
	}
	for _, bad := range []string{"", "Deployment", "apps/v1/Deployment", "a/b/c/d=x", "/Kind=x"} {
		if _, err := ParseKinds(bad); !errors.Is(err, ErrBadKind) {
			t.Errorf("ParseKinds(%q) = %v", bad, err)
		}
	}
}

func TestNodeWatcher(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}})
	now := time.Unix(100, 0)
	w := NewNodeWatcher(cs, func() time.Time { return now })
	if _, gone := w.NodeGone("n9"); gone {
		t.Fatal("gone before sync")
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(t.Context()) }()
	waitFor(t, w, func() bool { _, g := w.NodeGone("n1"); return !g && w.isSynced() })
	if since, gone := w.NodeGone("n9"); !gone || !since.Equal(now) {
		t.Fatalf("never-seen node: %v %v", since, gone)
	}
	if err := cs.CoreV1().Nodes().Delete(t.Context(), "n2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, func() bool { _, g := w.NodeGone("n2"); return g })
}

func (w *NodeWatcher) isSynced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// waitFor waits on the watcher's change notifications until cond holds.
func waitFor(t *testing.T, w *NodeWatcher, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-w.Changed():
		case <-deadline:
			t.Fatal("condition not met within 10s")
		}
	}
}

func controllerOwner(apiVersion, kind, name, uid string) store.Owner {
	return store.Owner{APIVersion: apiVersion, Kind: kind, Namespace: "ml", Name: name, UID: uid}
}
