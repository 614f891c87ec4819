package e2enri

import (
	"testing"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestNRIHSNInterfaceOnEveryNIC: the device plugin with allNICs and a pool
// per rail: a pod holding two NICs has hsn0 and hsn1, each a macvlan child
// of its own NIC's hsn netdev with an address of that netdev's own pool,
// in the order of its SLINGSHOT_DEVICES (set at CreateContainer); the
// agent's pod deleted and made again, they stay as they were.
func TestNRIHSNInterfaceOnEveryNIC(t *testing.T) {
	env.CheckRailsKept(t, env.TestNamespace(t, "nri-rails"), cluster.Job("rails", 1, 2), nil)
}
