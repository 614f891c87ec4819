// Command demo-node starts the real node of the end-to-end tests with the
// project installed, and leaves it up for a person to explore with kubectl
// until Ctrl-C (or SIGTERM), which tears it down and removes its root.
package main

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/node"
)

// job is an example Job for the node, written into its root.
//
//go:embed job.yaml
var job []byte

func main() {
	root, inside := node.Inside()
	if !inside {
		code, err := node.Enter(os.Getenv("REAL_NODE_TMP"), func(root string) error {
			return cluster.Build(context.Background(), cluster.Options{Root: root, Logf: logf})
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo-node:", err)
		}
		os.Exit(code)
	}
	if err := run(root); err != nil {
		fmt.Fprintln(os.Stderr, "demo-node:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	setupCtx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	env, err := cluster.Setup(setupCtx, cluster.Options{Root: root, HSNInterface: true, Logf: logf})
	cancel()
	defer env.Stop()
	if err != nil {
		return err
	}
	jobFile := filepath.Join(root, "job.yaml")
	if err := os.WriteFile(jobFile, job, 0o644); err != nil {
		return err
	}
	fmt.Printf(`
The node is up, with the chart installed in namespace %[1]s.
It lives in its own PID, mount and network namespaces; reach it from
another terminal through them (PID %[2]d on the host is its init):

  sudo nsenter -t %[2]d -p -m -n env KUBECONFIG=%[3]s %[4]s get pods -A
  sudo nsenter -t %[2]d -p -m -n env KUBECONFIG=%[3]s %[4]s apply -f %[5]s
  sudo nsenter -t %[2]d -p -m -n env KUBECONFIG=%[3]s %[4]s logs job/demo
  sudo nsenter -t %[2]d -p -m -n curl -s %[6]s/inspect

(%[5]s: a Job of two pods with one NIC share each.)
Logs: %[7]s. Ctrl-C here tears the node down and removes %[8]s.
`, cluster.Namespace, node.HostPID(root), env.Node.Kubeconfig, env.KubectlPath(), jobFile, env.InspectURL, env.Node.LogDir, root)
	<-ctx.Done()
	fmt.Println("demo-node: stopping")
	return nil
}

func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
