// Package e2emulti tests jobs across real nodes: one control plane and two
// nodes, each its own kubelet and containerd (with NRI) in namespaces of
// its own, with its own mock machine, simulated driver and agent, and one
// controller (package cluster, Options.Nodes), with hardware collectives
// on against a fake fabric manager this process serves (hwcoll_test.go). The cluster is set up once
// for the package, in the mode -node-api names: "deviceplugin" (the
// default) runs every test but the DRA ones; "dra" runs only
// TestMultiDRAClaimTemplate and TestMultiDRAPodGroupClaim, with the
// PodGroup claims gates on.
package e2emulti

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/node"
)

var (
	apiFlag = flag.String("node-api", cluster.APIDevicePlugin, "the agents' front end: deviceplugin (every test but the DRA ones), or dra (only the TestMultiDRA tests)")
	// env is the first node's Env; env.Nodes() every node's.
	env *cluster.Env
)

const (
	// nodes in the cluster.
	nodes = 2
	// sliceGrace is the controller's --slice-grace (the chart's
	// controller.sliceGrace): how long a deleted node keeps its holds.
	// Short, so TestMultiNodeDeleted sees it end, long enough to see the
	// holds kept meanwhile.
	sliceGrace = 20 * time.Second
	// sweepInterval is the controller's --sweep-interval: how soon after
	// the grace the holds go.
	sweepInterval = 2 * time.Second
	// podVNIRange and podVNISliceSize carve the pod-scoped VNIs into node
	// slices.
	podVNIRange     = "60000-60255"
	podVNISliceSize = 32
)

func TestMain(m *testing.M) {
	flag.Parse()
	run := func() int {
		code := m.Run()
		if fm != nil {
			fm.Close()
		}
		return code
	}
	os.Exit(cluster.TestMain(run, func(root string) cluster.Options {
		o := cluster.Options{
			Root: root, API: *apiFlag, Nodes: nodes, NICs: 2, Logf: logf,
			// Heartbeats often, so that a node's report of its slices'
			// use reaches the controller soon (TestMultiNodeDeleted).
			AgentArgs: []string{"--controller-heartbeat=2s"},
			Values: map[string]any{"controller": map[string]any{
				"podVNIRange": podVNIRange, "podVNISliceSize": podVNISliceSize,
				"sliceGrace": sliceGrace.String(),
				"extraArgs":  []any{"--sweep-interval=" + sweepInterval.String()},
			}},
		}
		if *apiFlag == cluster.APIDRA {
			// PodGroup claims (TestMultiDRAPodGroupClaim): Kubernetes'
			// gates on every component, the PodGroup API served, and
			// the chart's fabric VNI device.
			o.FeatureGates = []string{"GenericWorkload", "DRAWorkloadResourceClaims"}
			o.RuntimeConfig = "scheduling.k8s.io/v1beta1=true"
			o.Values["dra"] = map[string]any{"podGroupClaims": true}
		}
		if _, inside := node.Inside(); inside {
			// The fake fabric manager, on this process's network: every
			// Job's lease reserves hardware collectives at it.
			var err error
			if fm, err = startFabricManager(); err != nil {
				fmt.Fprintln(os.Stderr, "fake fabric manager:", err)
				os.Exit(1)
			}
			fm.configure(&o)
		}
		return o
	}, func(e *cluster.Env) { env = e }))
}

func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// needAPI skips a test when the agents serve another front end.
func needAPI(tb testing.TB, api string) {
	tb.Helper()
	if *apiFlag != api {
		tb.Skipf("the agents run with api %q; this test needs %q", *apiFlag, api)
	}
}
