// Package e2e tests the pod path on a whole real node (package cluster):
// the chart installed with Helm, pods made by real Jobs, and the kubelet,
// the agent and containerd restarted under running pods.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// env is the one real node every test of the package runs on: starting a
// node and installing the chart takes a minute, so the tests share it and
// each removes what it made.
var env *cluster.Env

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(cluster.TestMain(m.Run, func(root string) cluster.Options {
		return cluster.Options{
			Root: root,
			// Every pod holding a NIC gets an hsn interface: the other tests'
			// pods go through that path too (TestHSNInterfaceTCP); a pod of
			// several NICs gets one on each (TestHSNInterfaceOnEveryNIC), all
			// from one pool, so that any two pods reach each other.
			HSNInterface: true, HSNAllNICs: true,
			// The agent privileged, as the chart's production default: it
			// pins the namespaces its services admit, and the pins outlive
			// it (TestAgentKilledSandboxesMadeAgain).
			PinNetns: true,
			// A service kept busy taints the node soon, and is retried
			// often once free (TestCleanupStuckTaintsNode); BULK_DATA for
			// one namespace (TestServiceOptions); pods that ask for no
			// options get the defaults.
			Values: map[string]any{"agent": map[string]any{"config": map[string]any{
				"cleanup":    map[string]any{"drainAfter": "10s", "retryStuckEvery": "2s"},
				"jobOptions": cluster.JobOptions(hpcNamespace),
			}}},
			Logf: logf,
		}
	}, func(e *cluster.Env) { env = e }))
}

func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
