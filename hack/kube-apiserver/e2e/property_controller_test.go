package e2e

import (
	"testing"

	"github.com/slingshot-k8s/slingshot/controller/controllertest"
)

// TestPropertyNoVNIHeldByTwoLiveJobs is the controller's own property test
// (controller/property_test.go runs it on sqlite) on both stores: the
// same body, from controller/controllertest, at full scale (64 clients x
// 1,000 cycles) on each.
func TestPropertyNoVNIHeldByTwoLiveJobs(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			controllertest.NoVNIHeldByTwoLiveJobs(t, b.open(t), *propClients, *propCycles)
		})
	}
}
