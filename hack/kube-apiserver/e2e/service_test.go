package e2e

import (
	"path/filepath"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
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
func runService(t testing.TB, st store.Store, res controller.Resolver, cfg controller.Config) *controller.Allocator {
	t.Helper()
	svc, _ := controllertest.Start(t, st, res, cfg)
	return svc
}
