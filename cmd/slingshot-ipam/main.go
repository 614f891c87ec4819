// Command slingshot-ipam is the CNI IPAM plugin that gives pods addresses
// on the Slingshot high-speed network from the node's slices; the node's
// slingshot-agent allocates them. Run without CNI_COMMAND it prints its
// usage; `slingshot-ipam install DIR` (also only without CNI_COMMAND)
// copies the binary into a CNI bin dir, which is how the DaemonSet's init
// container installs it on the node from a distroless image with no cp.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/slingshot-k8s/slingshot/cni/ipamplugin"
)

func main() {
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 && os.Args[1] == "install" {
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "slingshot-ipam install: find this binary:", err)
			os.Exit(1)
		}
		os.Exit(runInstall(os.Args[2:], self, time.Now(), os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := skel.PluginMainFuncsWithError(ipamplugin.Funcs(ctx, os.Stdout), ipamplugin.Versions, ipamplugin.About+"\n\n"+installUsage)
	stop()
	if e != nil {
		if err := e.Print(); err != nil {
			fmt.Fprintln(os.Stderr, "slingshot-ipam: write error:", err)
		}
		os.Exit(1)
	}
}
