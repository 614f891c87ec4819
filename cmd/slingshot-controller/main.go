// Command slingshot-controller is the Slingshot cluster controller: it
// leases job VNIs and node slices to the node agents over gRPC, serves the
// Metacontroller hooks, and keeps its state in sqlite (one replica) or in
// custom resources (--store kube, with --leader-elect for two or more
// replicas). "export" and "import" move the state between stores. See
// --help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/slingshot-k8s/slingshot/internal/version"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "export" || os.Args[1] == "import") {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := runTransfer(ctx, os.Args[1], os.Args[2:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
		stop()
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "slingshot-controller %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	cfg, err := parseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if errors.Is(err, errVersion) {
		if _, err := fmt.Print(version.Get().String("slingshot-controller")); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "slingshot-controller: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "slingshot-controller: %v\n", err)
		os.Exit(1)
	}
}
