// Package e2edra tests the agent's DRA front end on a whole real node
// (package cluster): the chart installed with api "dra", the agent a
// kubelet DRA plugin and an NRI plugin of containerd, pods given NICs by
// ResourceClaims from templates, and the kubelet and the agent restarted
// under running pods. The node is set up once for the package, in the mode
// -node-api names: "dra" (the default) runs every test; "deviceplugin"
// runs only BenchmarkAllocatedToStarted, the same pods asking for
// hpe.com/cxi, for comparison.
package e2edra

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

var (
	apiFlag = flag.String("node-api", cluster.APIDRA, "the agent's front end on the node: dra, or deviceplugin (then only BenchmarkAllocatedToStarted runs)")
	// env is the one real node every test of the package runs on.
	env *cluster.Env
)

// nics is the mock node's NIC count. Claims share a NIC (consumable
// capacity), each with a service of its own, up to the NIC's free
// services.
const nics = 4

// lostClaimGrace is the agent's --dra-lost-claim-grace on this node.
const lostClaimGrace = 10 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(cluster.TestMain(m.Run, func(root string) cluster.Options {
		// A short grace, so that TestDRAKubeletLostClaimState sees the
		// agent collect a claim the kubelet forgot within the test.
		// BULK_DATA and the storage VNI for one namespace
		// (TestDRAServiceOptions). The agent privileged, as the chart's
		// production default: it pins the namespaces its services admit,
		// and the pins outlive it (TestDRAAgentKilledSandboxesMadeAgain).
		// Every pod with a claim gets an hsn interface on each of its NICs,
		// from the NIC's rail's own pool, which its claim's status names
		// (TestDRANetworkData).
		return cluster.Options{Root: root, API: *apiFlag, NICs: nics, Logf: logf, PinNetns: true, HSNInterface: true,
			// The controller's leases outlive its pod, as in a cluster
			// (TestDRABindingConditions stops and restarts it).
			ControllerVolume: true, HSNAllNICs: true, HSNRailPools: true, AgentArgs: []string{"--dra-lost-claim-grace=" + lostClaimGrace.String()},
			Values: map[string]any{"agent": map[string]any{"config": map[string]any{"jobOptions": cluster.JobOptions(hpcNamespace)}}}}
	}, func(e *cluster.Env) { env = e }))
}

func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// needDRA skips a test when the node runs the device plugin.
func needDRA(tb testing.TB) {
	tb.Helper()
	if *apiFlag != cluster.APIDRA {
		tb.Skipf("the node runs the agent with api %q", *apiFlag)
	}
}
