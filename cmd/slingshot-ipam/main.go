// Command slingshot-ipam is the CNI IPAM plugin that gives pods addresses
// on the Slingshot high-speed network from the node's slices; the node's
// slingshot-agent allocates them. Run without CNI_COMMAND it prints its
// usage; `slingshot-ipam install DIR` (also only without CNI_COMMAND)
// copies the binary into a CNI bin dir, which is how the DaemonSet's init
// container installs it on the node from a distroless image with no cp.
// `slingshot-ipam --version` (only without CNI_COMMAND, so that CNI's own
// VERSION command is answered by skel as ever) prints its build.
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
	"github.com/slingshot-k8s/slingshot/internal/version"
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
	// A runtime always sets CNI_COMMAND, and passes no arguments.
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) == 2 && os.Args[1] == "--version" {
		if _, err := fmt.Print(version.Get().String("slingshot-ipam")); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	about := ipamplugin.About + "\n\nVersion " + version.Version + " (slingshot-ipam --version for the build).\n\n" + installUsage
	e := skel.PluginMainFuncsWithError(ipamplugin.Funcs(ctx, os.Stdout), ipamplugin.Versions, about)
	stop()
	if e != nil {
		if err := e.Print(); err != nil {
			fmt.Fprintln(os.Stderr, "slingshot-ipam: write error:", err)
		}
		os.Exit(1)
	}
}
