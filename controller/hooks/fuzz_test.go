package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
)

// mapService is a minimal in-memory Service for fuzzing the handler.
type mapService struct {
	mu   sync.Mutex
	next uint16
	vnis map[string]uint16
}

func (m *mapService) AcquireOwnerVNI(_ context.Context, o store.Owner, p controller.Policy) (controller.Lease, error) {
	if p.Mode == controller.ModeNone || p.Mode == controller.ModePod {
		return controller.Lease{Scope: controller.ScopeNone}, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := controller.LeaseKey(store.ScopeJob, o)
	v, ok := m.vnis[key]
	if !ok {
		m.next++
		v = 1024 + m.next%60000
		m.vnis[key] = v
	}
	return controller.Lease{Key: key, VNI: v, Scope: store.ScopeJob, Owner: o}, nil
}

func (m *mapService) FinalizeOwner(_ context.Context, o store.Owner, deleting bool) (controller.Lease, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if deleting {
		delete(m.vnis, controller.LeaseKey(store.ScopeJob, o))
	}
	return controller.Lease{}, true, nil
}

func seeds(f *testing.F) {
	for _, s := range []string{
		`{"controller":{},"object":{"apiVersion":"batch/v1","kind":"Job","metadata":{"namespace":"ml","name":"a","uid":"u1"}},"attachments":{},"finalizing":false}`,
		`{"object":{"apiVersion":"batch/v1","kind":"Job","metadata":{"namespace":"ml","name":"a","uid":"u1","annotations":{"slingshot.hpe.com/vni":"claim:shared"}}}}`,
		`{"object":{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"namespace":"ml","name":"a","uid":"u1","ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","uid":"d1","controller":true}]}}}`,
		`{"object":{"apiVersion":"batch/v1","kind":"Job","metadata":{"namespace":"ml","name":"a","uid":"u1","deletionTimestamp":"2026-01-01T00:00:00Z"}},"attachments":{"VNI.slingshot.hpe.com/v1alpha1":{"vni-u1":{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"VNI","metadata":{"name":"vni-u1"},"spec":{"vni":1100}}}},"finalizing":true}`,
		`{"object":{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x","uid":"u"}}}`,
		`{"object":{}}`, `[]`, `null`, `{"attachments":{"a":{"b":null}}}`,
	} {
		f.Add([]byte(s))
	}
}

func FuzzParseRequest(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRequest(data)
		if err != nil {
			return
		}
		if r.Object == nil || r.Object.Metadata.UID == "" || r.Object.Metadata.Namespace == "" {
			t.Fatalf("accepted a request without object identity: %s", data)
		}
		r.observedVNIs()
	})
}

// FuzzHooks posts each input to both hooks of a handler that trusts its
// bodies and of one that confirms them with a (fake) API server holding
// the Job ml/a (UID u1).
func FuzzHooks(f *testing.F) {
	seeds(f)
	api, _ := fakeAPI(f, apiJob("a", "u1", nil, false))
	handlers := []*Handler{New(&mapService{vnis: map[string]uint16{}}, nil, followed, nil, nil),
		New(&mapService{vnis: map[string]uint16{}}, api, followed, nil, nil)}
	f.Fuzz(func(t *testing.T, data []byte) {
		for i, path := range []string{"/sync", "/finalize", "/sync", "/finalize"} {
			rec := httptest.NewRecorder()
			handlers[i/2].ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(data)))
			switch rec.Code {
			case http.StatusOK:
				var resp Response
				if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
					t.Fatalf("%s: 200 with undecodable body: %v", path, err)
				}
				for _, a := range resp.Attachments {
					if a.Kind != KindVNI || a.Spec.VNI == 0 || a.Metadata.Name == "" {
						t.Fatalf("%s: bad attachment %+v", path, a)
					}
				}
			case http.StatusBadRequest:
			case http.StatusConflict:
				if i < 2 {
					t.Fatalf("%s: 409 from the handler that confirms nothing: %s", path, rec.Body)
				}
			default:
				t.Fatalf("%s: unexpected code %d: %s", path, rec.Code, rec.Body)
			}
		}
	})
}
