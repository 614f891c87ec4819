// Command kubectl-slingshot is the kubectl plugin `kubectl slingshot`
// (krew's naming: kubectl runs kubectl-slingshot from PATH): the
// cluster's Slingshot VNI leases, one pod's VNI and services, and each
// node's NICs, read with the user's kubeconfig and RBAC alone.
//
//	kubectl slingshot vnis [-n OWNER-NAMESPACE] [-o json]
//	kubectl slingshot pod NAME [-n NAMESPACE] [-o json]
//	kubectl slingshot nodes [-o json]
//
// The logic is in package kubectlplugin.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slingshot-k8s/slingshot/kubectlplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	cmd := &kubectlplugin.Command{Stdout: os.Stdout, Stderr: os.Stderr, Now: time.Now, Connect: kubectlplugin.Connect}
	err := cmd.Run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		if errors.Is(err, kubectlplugin.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
