// Command replica is one controller replica for the failover tests: the
// controller's Service on the Kubernetes store, run only while this
// replica leads (package leader), serving the agents' gRPC API. It is the
// part of slingshot-controller --store kube --leader-elect the tests need,
// without the Kubernetes resolver (every lease is pod-scoped).
//
// Environment: KUBE_URL, KUBE_TOKEN (an admin token). Flags: see -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/leader"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(1)
	}
}

func run() error {
	ns := flag.String("namespace", "", "namespace of the store and the election lease")
	id := flag.String("identity", "", "replica identity")
	addr := flag.String("grpc-addr", "127.0.0.1:0", "gRPC listen address")
	leaseDur := flag.Duration("lease-duration", 0, "leader lease duration (0: the package default)")
	renew := flag.Duration("renew-deadline", 0, "leader renew deadline (0: the package default)")
	retry := flag.Duration("retry-period", 0, "leader retry period (0: the package default)")
	quarantine := flag.Duration("quarantine", 60*time.Second, "vni quarantine (negative: none)")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", *id)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := &rest.Config{Host: os.Getenv("KUBE_URL"), BearerToken: os.Getenv("KUBE_TOKEN"), QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, Timeout: 30 * time.Second}
	st, err := kube.New(cfg, kube.Options{Namespace: *ns, Identity: *id, Logger: log})
	if err != nil {
		return err
	}
	svc, err := controller.New(st, nil, nil, controller.Config{Quarantine: *quarantine, Logger: log})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	el, err := leader.New(cs.CoordinationV1(), leader.Config{Namespace: *ns, Name: "slingshot-controller", Identity: *id,
		LeaseDuration: *leaseDur, RenewDeadline: *renew, RetryPeriod: *retry, Logger: log})
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	grpcapi.NewServer(svc, time.Minute).Register(gs)
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	fmt.Printf("listening %s\n", lis.Addr())
	err = el.Run(ctx, svc.Run)
	gs.Stop()
	if serr := <-served; serr != nil && !errors.Is(serr, grpc.ErrServerStopped) {
		err = errors.Join(err, serr)
	}
	return err
}
