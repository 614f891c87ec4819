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
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/node"
)

var (
	apiFlag = flag.String("node-api", cluster.APIDRA, "the agent's front end on the node: dra, or deviceplugin (then only BenchmarkAllocatedToStarted runs)")
	// env is the one real node every test of the package runs on.
	env *cluster.Env
)

// nics is the mock node's NIC count: a Job of two pods holding one each
// leaves two for the pods a test makes beside it (a NIC is one device, one
// claim at a time).
const nics = 4

func TestMain(m *testing.M) {
	flag.Parse()
	root, inside := node.Inside()
	if !inside {
		// First run: again as the init of the node's own namespaces.
		code, err := node.Enter(os.Getenv("REAL_NODE_TMP"), func(root string) error {
			return cluster.Build(context.Background(), cluster.Options{Root: root, Logf: logf})
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "real node:", err)
		}
		os.Exit(code)
	}
	os.Exit(run(m, root))
}

func run(m *testing.M, root string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Printf("real node (%s): root %s; logs in %s\n", *apiFlag, root, filepath.Join(root, "logs"))
	setupCtx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	var err error
	env, err = cluster.Setup(setupCtx, cluster.Options{Root: root, API: *apiFlag, NICs: nics, Logf: logf})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "real node: setup:", err)
		if env != nil {
			env.Stop()
		}
		return 1
	}
	// As the node's init this process gets only the signals it handles,
	// and the tests do not watch for them.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "real node: interrupted; stopping")
		env.Stop()
		os.Exit(2)
	}()
	code := m.Run()
	env.Stop()
	return code
}

func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// needDRA skips a test when the node runs the device plugin.
func needDRA(tb testing.TB) {
	tb.Helper()
	if *apiFlag != cluster.APIDRA {
		tb.Skipf("the node runs the agent with api %q", *apiFlag)
	}
}
