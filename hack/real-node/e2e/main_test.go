// Package e2e tests the pod path on a whole real node (package cluster):
// the chart installed with Helm, pods made by real Jobs, and the kubelet,
// the agent and containerd restarted under running pods.
package e2e

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

// env is the one real node every test of the package runs on: starting a
// node and installing the chart takes a minute, so the tests share it and
// each removes what it made.
var env *cluster.Env

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
	// The node's init receives only the signals it handles.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Printf("real node: root %s; logs in %s\n", root, filepath.Join(root, "logs"))
	setupCtx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	var err error
	env, err = cluster.Setup(setupCtx, cluster.Options{
		Root: root,
		// Every pod holding a NIC gets an hsn interface: the other tests'
		// pods go through that path too (TestHSNInterfaceTCP).
		HSNInterface: true,
		Logf:         logf,
	})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "real node: setup:", err)
		if env != nil {
			env.Stop()
		}
		return 1
	}
	// A signal ends the run: as the node's init this process gets only
	// the signals it handles, and the tests do not watch for them.
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
