package cluster

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/real-node/node"
)

// TestMain runs a test package on one real node and returns its exit
// code. The first run builds the node's parts and runs the test binary
// again as the init of the node's own namespaces; that run sets the node
// up with options(root), hands it to use, runs the tests (run, usually
// testing.M's Run) and stops the node. Starting a node and installing the
// chart takes a minute, so a package's tests share one.
//
// With several nodes (Options.Nodes) each node's init is the test binary
// run once more, inside the namespaces of its own (node.StartCluster);
// there TestMain runs the node alone.
func TestMain(run func() int, options func(root string) Options, use func(*Env)) int {
	if node.IsWorker() {
		return node.RunWorker()
	}
	root, inside := node.Inside()
	if !inside {
		code, err := node.Enter(os.Getenv("REAL_NODE_TMP"), func(root string) error {
			opts := options(root)
			return Build(context.Background(), Options{Root: root, RepoDir: opts.RepoDir, Baseline: opts.Baseline, Logf: opts.Logf})
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "real node:", err)
		}
		return code
	}
	// The node's init receives only the signals it handles.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	opts := options(root)
	fmt.Printf("real node (api %s, %d node(s)): root %s; logs in %s\n", orDefault(opts.API, APIDevicePlugin), max(opts.Nodes, 1), root, filepath.Join(root, "logs"))
	setupCtx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	env, err := Setup(setupCtx, opts)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "real node: setup:", err)
		if env != nil {
			env.Stop()
		}
		return 1
	}
	use(env)
	// A signal ends the run: the tests do not watch for them.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "real node: interrupted; stopping")
		env.Stop()
		os.Exit(2)
	}()
	code := run()
	env.Stop()
	return code
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
