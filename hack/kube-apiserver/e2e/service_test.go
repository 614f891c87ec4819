package e2e

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
)

// backend opens one of the two stores for a test.
type backend struct {
	name string
	open func(t testing.TB) store.Store
}

func backends() []backend {
	return []backend{
		{"sqlite", func(t testing.TB) store.Store {
			st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "controller.db"))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
		{"kube", func(t testing.TB) store.Store { return openKube(t, newNamespace(t, "svc"), "test") }},
	}
}

// runService runs a Service over st until the test ends and waits until
// its state is loaded.
func runService(t testing.TB, st store.Store, res controller.Resolver, cfg controller.Config) *controller.Service {
	t.Helper()
	svc, err := controller.New(st, res, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case <-svc.Loaded():
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("state did not load within 2 min")
	}
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			st.Close()
		})
	})
	return svc
}

// jobResolver resolves each pod to the job its test registered; a job
// exists until the test says it is gone.
type jobResolver struct {
	mu   sync.Mutex
	pods map[string]store.Owner
	gone map[string]bool // owner namespace/name
}

func newJobResolver() *jobResolver {
	return &jobResolver{pods: map[string]store.Owner{}, gone: map[string]bool{}}
}

func (r *jobResolver) add(pod string, owner store.Owner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods[pod] = owner
}

func (r *jobResolver) setGone(owner store.Owner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone[owner.Namespace+"/"+owner.Name] = true
}

func (r *jobResolver) ResolvePod(_ context.Context, p controller.PodRef) (controller.Resolution, error) {
	r.mu.Lock()
	owner, ok := r.pods[p.Name]
	r.mu.Unlock()
	res := controller.Resolution{Pod: store.Owner{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Policy: controller.Policy{Mode: controller.ModeJob}}
	if ok {
		res.Owner = &owner
	}
	return res, nil
}

func (r *jobResolver) OwnerExists(_ context.Context, o store.Owner) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.gone[o.Namespace+"/"+o.Name], nil
}
