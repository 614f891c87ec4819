// Package e2ekubectl runs kubectl slingshot (cmd/kubectl-slingshot)
// against a whole real node (package cluster) whose controller keeps its
// leases in the Kubernetes API (controller.store=kube): the VNILeases it
// writes are what `kubectl slingshot vnis` reads, and the agent's report
// comes through the API server's pods/exec, as a user's would.
package e2ekubectl

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// env is the real node the package's tests share.
var env *cluster.Env

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(cluster.TestMain(m.Run, func(root string) cluster.Options {
		return cluster.Options{
			Root: root,
			// The pods' hsn addresses show in `kubectl slingshot pod`.
			HSNInterface: true,
			Values:       map[string]any{"controller": map[string]any{"store": "kube"}},
			Logf:         logf,
		}
	}, func(e *cluster.Env) { env = e }))
}

func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
