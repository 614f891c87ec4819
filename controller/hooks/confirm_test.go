package hooks

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/owner"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
)

var jobsGVR = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}

// apiJob is a Job as the API server holds it.
func apiJob(name, uid string, annotations map[string]string, deleting bool) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(uid), Annotations: annotations}}
	if deleting {
		now := metav1.Now()
		o.DeletionTimestamp = &now
	}
	return o
}

// fakeAPI is the metadata API of an API server holding objs, behind the
// controller's own resolver.
func fakeAPI(t testing.TB, objs ...runtime.Object) (*owner.Resolver, *metadatafake.FakeMetadataClient) {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, objs...)
	return owner.NewResolver(md, owner.DefaultKinds), md
}

// confirmed is a handler whose hooks confirm bodies with api, and its
// refusal counter.
func confirmed(t *testing.T, svc Service, api Parents) (*Handler, *prometheus.CounterVec) {
	t.Helper()
	h := New(svc, api, followed, nil, prometheus.NewRegistry())
	return h, h.refused
}

func deletedAt() *string {
	s := "2026-01-01T00:00:00Z"
	return &s
}

// TestItem7ForgedSyncRefused (issue 15, item 7): a /sync whose parent the
// API server does not hold with the body's UID leases nothing, and is
// answered 409 and counted; a body cannot choose the parent's policy.
// Before the hooks confirmed bodies, every one of these leased a VNI.
func TestItem7ForgedSyncRefused(t *testing.T) {
	tests := []struct {
		name   string
		api    []runtime.Object
		body   *Object
		code   int
		reason string // counted refusal, "" for none
		leased bool
	}{
		{"no such parent", nil, jobObject("ghost", "u-ghost", nil), http.StatusConflict, ReasonNoParent, false},
		{"another UID", []runtime.Object{apiJob("train", "u-real", nil, false)}, jobObject("train", "u-forged", nil),
			http.StatusConflict, ReasonUIDMismatch, false},
		{"a kind the controller does not follow",
			nil, &Object{APIVersion: "apps/v1", Kind: "DaemonSet", Metadata: ObjectMeta{Namespace: "ml", Name: "ds", UID: "u-ds"}},
			http.StatusConflict, ReasonKindNotFollowed, false},
		{"parent being deleted", []runtime.Object{apiJob("old", "u-old", nil, true)}, jobObject("old", "u-old", nil),
			http.StatusOK, ReasonParentDeleting, false},
		{"body hides the parent's opt-out", []runtime.Object{apiJob("quiet", "u-quiet", map[string]string{controller.AnnotationVNI: "none"}, false)},
			jobObject("quiet", "u-quiet", nil), http.StatusOK, "", false},
		{"the real parent", []runtime.Object{apiJob("train", "u-real", nil, false)}, jobObject("train", "u-real", nil),
			http.StatusOK, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := newService(t, true, controller.Config{})
			api, _ := fakeAPI(t, tt.api...)
			h, refused := confirmed(t, svc, api)
			code, resp, _ := call(t, h, "/sync", &Request{Object: tt.body})
			if code != tt.code {
				t.Fatalf("code %d, want %d", code, tt.code)
			}
			if resp != nil && (len(resp.Attachments) > 0) != tt.leased {
				t.Errorf("attachments %+v, want leased=%v", resp.Attachments, tt.leased)
			}
			leases, _, _ := svc.ListLeases()
			if (len(leases) > 0) != tt.leased {
				t.Errorf("leases %+v, want leased=%v", leases, tt.leased)
			}
			if tt.reason != "" {
				if n := testutil.ToFloat64(refused.WithLabelValues("sync", tt.reason)); n != 1 {
					t.Errorf("refused{sync,%s} = %v, want 1", tt.reason, n)
				}
			} else if n := refusedTotal(refused); n != 0 {
				t.Errorf("%v refusals counted, want none", n)
			}
		})
	}
}

// TestItem7ForgedFinalizeRefused (issue 15, item 7): a /finalize that says
// a live parent is being deleted is answered 409 and counted, and the
// parent keeps its VNI; once the API server agrees (a deletionTimestamp,
// the parent gone, or its name taken by another UID) the same body
// finalizes. Before the hooks confirmed bodies, the forged finalize marked
// the owner gone and freed its VNI.
func TestItem7ForgedFinalizeRefused(t *testing.T) {
	tests := []struct {
		name string
		// then makes the API server agree that the parent is going.
		then func(t *testing.T, md *metadatafake.FakeMetadataClient)
	}{
		{"deletionTimestamp", func(t *testing.T, md *metadatafake.FakeMetadataClient) {
			if err := md.Tracker().Update(jobsGVR, apiJob("train", "u-1", nil, true), "ml"); err != nil {
				t.Fatal(err)
			}
		}},
		{"gone", func(t *testing.T, md *metadatafake.FakeMetadataClient) {
			if err := md.Tracker().Delete(jobsGVR, "ml", "train"); err != nil {
				t.Fatal(err)
			}
		}},
		{"name taken by another UID", func(t *testing.T, md *metadatafake.FakeMetadataClient) {
			if err := md.Tracker().Update(jobsGVR, apiJob("train", "u-2", nil, false), "ml"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := newService(t, true, controller.Config{})
			api, md := fakeAPI(t, apiJob("train", "u-1", nil, false))
			h, refused := confirmed(t, svc, api)
			obj := jobObject("train", "u-1", nil)
			_, synced, _ := call(t, h, "/sync", &Request{Object: obj})
			if synced == nil || len(synced.Attachments) != 1 {
				t.Fatalf("sync of the real parent: %+v", synced)
			}
			vni := synced.Attachments[0].Spec.VNI

			forged := *obj
			forged.Metadata.DeletionTimestamp = deletedAt()
			if code, _, _ := call(t, h, "/finalize", &Request{Object: &forged, Finalizing: true}); code != http.StatusConflict {
				t.Fatalf("forged finalize: code %d, want 409", code)
			}
			if n := testutil.ToFloat64(refused.WithLabelValues("finalize", ReasonParentAlive)); n != 1 {
				t.Errorf("refused{finalize,parent-alive} = %v, want 1", n)
			}
			leases, _, _ := svc.ListLeases()
			if len(leases) != 1 || leases[0].VNI != vni || leases[0].OwnerGone {
				t.Fatalf("after a forged finalize: leases %+v, want vni %d kept, owner not gone", leases, vni)
			}
			if _, again, _ := call(t, h, "/sync", &Request{Object: obj}); again == nil || len(again.Attachments) != 1 || again.Attachments[0].Spec.VNI != vni {
				t.Fatalf("sync after a forged finalize: %+v, want vni %d", again, vni)
			}

			tt.then(t, md)
			_, fin, _ := call(t, h, "/finalize", &Request{Object: &forged, Finalizing: true})
			if fin == nil || !fin.Finalized {
				t.Fatalf("finalize once the API server agrees: %+v", fin)
			}
			if leases, q, _ := svc.ListLeases(); len(leases) != 0 || len(q) != 1 || q[0].VNI != vni {
				t.Fatalf("after finalize: leases %+v, quarantine %+v; want vni %d quarantined", leases, q, vni)
			}
		})
	}
}

// Every refusal a hook can give is exported at 0 from the start: the
// chart's alert on refusals uses increase(), which cannot see the first
// increment of a series that appears with it.
func TestRefusalsStartAtZero(t *testing.T) {
	h := New(nil, nil, followed, nil, prometheus.NewPedanticRegistry())
	want := 0
	for _, reasons := range refusals {
		want += len(reasons)
	}
	if n := testutil.CollectAndCount(h.refused); n != want || want != 6 {
		t.Fatalf("%d refusal series at start, want %d (of 6)", n, want)
	}
	if n := refusedTotal(h.refused); n != 0 {
		t.Fatalf("%v refusals at start", n)
	}
}

// refusedTotal is the sum of refused over every reason a hook can give.
func refusedTotal(refused *prometheus.CounterVec) float64 {
	var n float64
	for hook, reasons := range refusals {
		for _, r := range reasons {
			n += testutil.ToFloat64(refused.WithLabelValues(hook, r))
		}
	}
	return n
}
