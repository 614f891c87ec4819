package controllertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
)

// LoadTimeout bounds how long Start waits for the service's state to load.
var LoadTimeout = 2 * time.Minute

// Start runs a Service over st until the test ends or stop is called, and
// waits until its state is loaded. stop cancels the service, checks that
// Run returned nil and closes st; it is idempotent and also runs at the
// end of the test.
func Start(t testing.TB, st store.Store, res controller.Resolver, cfg controller.Config) (svc *controller.Allocator, stop func()) {
	t.Helper()
	svc, err := controller.New(st, res, nil, cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	// The service outlives the test's context by the cleanup below, which
	// waits for Run to return before the store is closed.
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			st.Close()
		})
	}
	t.Cleanup(stop)
	select {
	case <-svc.Loaded():
	case err := <-done:
		done <- nil // Run's error is reported here; stop only closes st
		t.Fatalf("Run: %v", err)
	case <-time.After(LoadTimeout):
		t.Fatalf("state did not load within %v", LoadTimeout)
	}
	return svc, stop
}
