// Package e2enri tests the device plugin with --deviceplugin-nri on a
// whole real node (package cluster): the chart installed with
// agent.devicePluginNRI, so that containerd calls the agent at each
// container's creation, which lets a container holding its NICs be
// created only with its pod's services bound to the sandbox's network
// namespace, as the driver shows them, and sets the SLINGSHOT_* that name
// them; the Allocate answer carries no CDI device. The rest of the
// device-plugin path is the e2e suite's, on a node without NRI: this one
// checks what the mode changes, on a node of its own.
package e2enri

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// env is the one real node every test of the package runs on.
var env *cluster.Env

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(cluster.TestMain(m.Run, func(root string) cluster.Options {
		// The harness points the chart's dra.nriSocket at the node's NRI
		// socket in either mode.
		// Each pod gets an hsn interface on every NIC it holds, each
		// rail's from a pool of its own (TestNRIHSNInterfaceOnEveryNIC).
		return cluster.Options{Root: root, Logf: logf, HSNInterface: true, HSNAllNICs: true, HSNRailPools: true,
			Values: map[string]any{"agent": map[string]any{"devicePluginNRI": true}}}
	}, func(e *cluster.Env) { env = e }))
}

func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
