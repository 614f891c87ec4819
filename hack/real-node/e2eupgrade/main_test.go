// Package e2eupgrade moves the project on a whole real node (package
// cluster) between two releases while jobs run: the baseline, built by
// the test from a commit of the repository's own history (a git
// worktree), and HEAD, the working tree. Each release is installed with
// its own chart, as a site's `helm upgrade` and `helm rollback` do: the
// chart of a release carries what its binaries need (their flags, RBAC,
// CRDs), so HEAD's chart over the baseline's images, or the reverse, is
// no state a site reaches. What it tests is docs/upgrade.md's procedure:
// the upgrade (CRDs, controller, agents), the rollback (controller held,
// agents back) and the version skew between the controller and the
// agents that both pass through, on both of the controller's stores.
package e2eupgrade

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// baselineCommit is release 0.2.0, the first release (docs/upgrade.md):
// the release an upgrade starts from and a rollback returns to.
const baselineCommit = "fbf5f6645911564b6c1245b0e5845db4e1aa7d08"

// env is the one real node the package's tests share: each test brings
// the release to the state it starts from (deploy), so that each can run
// alone (-run).
var env *cluster.Env

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(cluster.TestMain(m.Run, func(root string) cluster.Options {
		return cluster.Options{
			Root:     root,
			Baseline: baselineCommit,
			// A site starts from the release it runs.
			InstallBaseline: true,
			// The sqlite store's leases outlive the controller's pod, as
			// on a site's volume: an upgrade replaces the pod.
			ControllerVolume: true,
			Logf:             logf,
		}
	}, func(e *cluster.Env) { env = e }))
}

func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
