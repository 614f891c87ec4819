package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

var followed = []GroupKind{{"apps", "Deployment"}, {"apps", "ReplicaSet"}, {"batch", "Job"}}

// podsOf resolves every pod to the Job "train" (uid-2) in namespace ml.
type podsOf struct{}

func (podsOf) ResolvePod(_ context.Context, p controller.PodRef) (controller.Resolution, error) {
	return controller.Resolution{
		Pod:   store.Owner{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: "p-" + p.Name},
		Owner: &store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "ml", Name: "train", UID: "uid-2"},
	}, nil
}

func (podsOf) OwnerExists(context.Context, store.Owner) (bool, error) { return true, nil }

func newService(t testing.TB, run bool, cfg controller.Config) *controller.Allocator {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	if run {
		svc, _ := controllertest.Start(t, st, podsOf{}, cfg)
		return svc
	}
	svc, err := controller.New(st, podsOf{}, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return svc
}

func jobObject(name, uid string, annotations map[string]string) *Object {
	return &Object{APIVersion: "batch/v1", Kind: "Job", Metadata: ObjectMeta{Namespace: "ml", Name: name, UID: uid, Annotations: annotations}}
}

func call(t testing.TB, h http.Handler, path string, req *Request) (int, *Response, http.Header) {
	t.Helper()
	body, _ := json.Marshal(req)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		return rec.Code, nil, rec.Header()
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	var resp Response
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatalf("decode response: %v: %s", err, rec.Body)
	}
	return rec.Code, &resp, rec.Header()
}

func TestSyncAndFinalize(t *testing.T) {
	svc := newService(t, true, controller.Config{})
	h := New(svc, nil, followed, nil, nil)
	obj := jobObject("train", "uid-1", nil)
	code, resp, _ := call(t, h, "/sync", &Request{Object: obj})
	if code != 200 || len(resp.Attachments) != 1 {
		t.Fatalf("sync: %d %+v", code, resp)
	}
	a := resp.Attachments[0]
	if a.APIVersion != "slingshot.hpe.com/v1alpha1" || a.Kind != "VNI" || a.Metadata.Name != "vni-uid-1" || a.Metadata.Namespace != "ml" || a.Spec.VNI < 1024 {
		t.Fatalf("attachment %+v", a)
	}
	if got := resp.Annotations[AnnotationAssigned]; got == nil || *got == "" {
		t.Fatalf("assigned annotation %v", got)
	}
	_, again, _ := call(t, h, "/sync", &Request{Object: obj})
	if again.Attachments[0].Spec.VNI != a.Spec.VNI {
		t.Fatal("sync is not idempotent")
	}
	deleted := "2026-01-01T00:00:00Z"
	obj.Metadata.DeletionTimestamp = &deleted
	observed := map[string]map[string]*Object{"VNI.slingshot.hpe.com/v1alpha1": {"vni-uid-1": {APIVersion: APIVersion, Kind: KindVNI}}}
	_, fin, _ := call(t, h, "/finalize", &Request{Object: obj, Attachments: observed, Finalizing: true})
	if fin.Finalized || len(fin.Attachments) != 0 || fin.ResyncAfterSeconds == 0 {
		t.Fatalf("finalize with attachment observed: %+v", fin)
	}
	for range 2 {
		_, fin, _ = call(t, h, "/finalize", &Request{Object: obj, Finalizing: true})
		if !fin.Finalized {
			t.Fatalf("finalize when clean: %+v", fin)
		}
	}
	_, q, _ := svc.ListLeases()
	if len(q) != 1 || q[0].VNI != a.Spec.VNI {
		t.Fatalf("vni not quarantined: %+v", q)
	}
}

func TestFinalizeWaitsForNodes(t *testing.T) {
	svc := newService(t, true, controller.Config{})
	h := New(svc, nil, followed, nil, nil)
	obj := jobObject("train", "uid-2", nil)
	call(t, h, "/sync", &Request{Object: obj})
	// A pod of the job runs on n1.
	pl, err := svc.AcquireJobVNI(t.Context(), controller.PodRef{Namespace: "ml", Name: "train-0"}, "n1")
	if err != nil || pl.Scope != store.ScopeJob {
		t.Fatalf("pod acquire: %+v %v", pl, err)
	}
	leases, _, _ := svc.ListLeases()
	deleted := "2026-01-01T00:00:00Z"
	obj.Metadata.DeletionTimestamp = &deleted
	_, fin, _ := call(t, h, "/finalize", &Request{Object: obj, Finalizing: true})
	if fin.Finalized || len(fin.Attachments) != 1 || fin.ResyncAfterSeconds != resyncDrainSeconds {
		t.Fatalf("finalize while a node holds: %+v", fin)
	}
	if _, err := svc.ReleaseJobVNI(t.Context(), leases[0].Key, "n1"); err != nil {
		t.Fatal(err)
	}
	_, fin, _ = call(t, h, "/finalize", &Request{Object: obj, Finalizing: true})
	if !fin.Finalized {
		t.Fatalf("finalize after release: %+v", fin)
	}
}

func TestSyncEdgeCases(t *testing.T) {
	svc := newService(t, true, controller.Config{VNIRange: vnialloc.Range{Min: 2000, Max: 2000}})
	h := New(svc, nil, followed, nil, nil)
	yes := true
	rs := &Object{APIVersion: "apps/v1", Kind: "ReplicaSet", Metadata: ObjectMeta{Namespace: "ml", Name: "web-1", UID: "rs-1",
		OwnerReferences: []OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d-1", Controller: &yes}}}}
	if _, resp, _ := call(t, h, "/sync", &Request{Object: rs}); len(resp.Attachments) != 0 {
		t.Fatalf("child of a deployment got %+v", resp)
	}
	_, resp, _ := call(t, h, "/sync", &Request{Object: jobObject("x", "u-x", map[string]string{controller.AnnotationVNI: "maybe"})})
	if resp.Annotations[AnnotationError] == nil || len(resp.Attachments) != 0 {
		t.Fatalf("bad annotation: %+v", resp)
	}
	if _, resp, _ := call(t, h, "/sync", &Request{Object: jobObject("n", "u-n", map[string]string{controller.AnnotationVNI: "none"})}); len(resp.Attachments) != 0 {
		t.Fatalf("opt-out got %+v", resp)
	}
	call(t, h, "/sync", &Request{Object: jobObject("a", "u-a", nil)})
	_, resp, _ = call(t, h, "/sync", &Request{Object: jobObject("b", "u-b", nil)})
	if resp.Annotations[AnnotationError] == nil || resp.ResyncAfterSeconds != resyncFullSeconds {
		t.Fatalf("full range: %+v", resp)
	}
	for _, body := range []string{"", "{", `{"object":null}`, `{"object":{"apiVersion":"v1","kind":"X","metadata":{"name":"a","uid":"u"}}}`,
		`{"object":{"apiVersion":"a/b/c","kind":"Job","metadata":{"namespace":"ml","name":"a","uid":"u"}}}`} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/sync", bytes.NewReader([]byte(body))))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("body %q: code %d", body, rec.Code)
		}
	}
}

func TestLoadingAnswers429(t *testing.T) {
	h := New(newService(t, false, controller.Config{}), nil, followed, nil, nil)
	code, _, hdr := call(t, h, "/sync", &Request{Object: jobObject("a", "u", nil)})
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("code %d Retry-After %q", code, hdr.Get("Retry-After"))
	}
}

// TestItem15FinalizeAnswerAlwaysCarriesFinalized (issue 15, item 15) reads the /finalize answer's JSON
// bytes: "finalized" is there whether it is true or false, as in
// Metacontroller's DecoratorHookResponse (a false was once omitted).
func TestItem15FinalizeAnswerAlwaysCarriesFinalized(t *testing.T) {
	svc := newService(t, true, controller.Config{})
	h := New(svc, nil, followed, nil, nil)
	obj := jobObject("train", "uid-2", nil)
	call(t, h, "/sync", &Request{Object: obj})
	pl, err := svc.AcquireJobVNI(t.Context(), controller.PodRef{Namespace: "ml", Name: "train-0"}, "n1")
	if err != nil {
		t.Fatalf("pod acquire: %v", err)
	}
	deleted := "2026-01-01T00:00:00Z"
	obj.Metadata.DeletionTimestamp = &deleted
	steps := []struct {
		name   string
		before func()
		want   string
	}{
		{"a node still holds the VNI", func() {}, "false"},
		{"released", func() {
			if _, err := svc.ReleaseJobVNI(t.Context(), pl.Key, "n1"); err != nil {
				t.Fatal(err)
			}
		}, "true"},
	}
	for _, s := range steps {
		s.before()
		fields := rawCall(t, h, "/finalize", &Request{Object: obj, Finalizing: true})
		got, ok := fields["finalized"]
		if !ok {
			t.Fatalf("%s: no \"finalized\" among the answer's fields %v", s.name, slices.Sorted(maps.Keys(fields)))
		}
		if string(got) != s.want {
			t.Fatalf("%s: finalized = %s, want %s", s.name, got, s.want)
		}
	}
}

// rawCall posts req to path and returns the top-level fields of the JSON
// answer as raw bytes, so a test sees what is on the wire.
func rawCall(t testing.TB, h http.Handler, path string, req *Request) map[string]json.RawMessage {
	t.Helper()
	body, _ := json.Marshal(req)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", path, rec.Code, rec.Body)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &fields); err != nil {
		t.Fatalf("%s: decode answer: %v: %s", path, err, rec.Body)
	}
	return fields
}
