// Command demo-node starts the real node of the end-to-end tests with the
// project installed, and leaves it up for a person to explore with kubectl
// until Ctrl-C (or SIGTERM), which tears it down and removes its root.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/node"
)

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
	env, err := cluster.Setup(setupCtx, cluster.Options{Root: root, Logf: logf})
	cancel()
	defer env.Stop()
	if err != nil {
		return err
	}
	fmt.Printf(`
The node is up, with the chart installed in namespace %[1]s.
It lives in its own PID, mount and network namespaces; reach it from
another terminal through them (PID %[2]d on the host is its init):

  sudo nsenter -t %[2]d -p -m -n env KUBECONFIG=%[3]s %[4]s get pods -A
  sudo nsenter -t %[2]d -p -m -n env KUBECONFIG=%[3]s %[4]s apply -f - <<EOF
  ... a Job whose pods ask for %[5]s: 1, image %[6]s, imagePullPolicy: Never
  EOF
  sudo nsenter -t %[2]d -p -m -n curl -s %[7]s/inspect

Logs: %[8]s. Ctrl-C here tears the node down and removes %[9]s.
`, cluster.Namespace, node.HostPID(root), env.Node.Kubeconfig, env.KubectlPath(), cluster.Resource, cluster.WorkloadImage, env.AgentURL, env.Node.LogDir, root)
	<-ctx.Done()
	fmt.Println("demo-node: stopping")
	return nil
}

func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
