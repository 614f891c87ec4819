package controller_test

import (
	"path/filepath"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
)

// TestPropertyNoVNIHeldByTwoLiveJobs runs the controller's property on the
// sqlite store; hack/kube-apiserver runs the same on the Kubernetes store.
func TestPropertyNoVNIHeldByTwoLiveJobs(t *testing.T) {
	clients, cycles := 64, 1000
	if testing.Short() {
		clients, cycles = 16, 100
	}
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	controllertest.NoVNIHeldByTwoLiveJobs(t, st, clients, cycles)
}
