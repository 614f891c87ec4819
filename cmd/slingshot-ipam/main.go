// Command slingshot-ipam is the CNI IPAM plugin that gives pods addresses
// on the Slingshot high-speed network from the node's slices; the node's
// slingshot-agent allocates them. The DaemonSet installs it into the
// node's CNI bin dir; run without CNI_COMMAND it prints its usage.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/slingshot-k8s/slingshot/cni/ipamplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := skel.PluginMainFuncsWithError(ipamplugin.Funcs(ctx, os.Stdout), ipamplugin.Versions, ipamplugin.About)
	stop()
	if e != nil {
		if err := e.Print(); err != nil {
			fmt.Fprintln(os.Stderr, "slingshot-ipam: write error:", err)
		}
		os.Exit(1)
	}
}
