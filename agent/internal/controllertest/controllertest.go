// Package controllertest serves a real cluster controller (sqlite store,
// group commit) over gRPC on loopback, for the agent's tests and
// benchmarks.
package controllertest

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"google.golang.org/grpc"
)

// Serve serves a real controller (sqlite store, group commit)
// of cfg over gRPC on loopback until the test ends, and returns it and its
// address once it has loaded its state.
func Serve(tb testing.TB, cfg controller.Config) (*controller.Allocator, string) {
	tb.Helper()
	return ServeResolving(tb, cfg, nil)
}

// ServeResolving is Serve with res finding the pods' owners, as the
// controller does over the Kubernetes API (nil: no pod has an owner).
func ServeResolving(tb testing.TB, cfg controller.Config, res controller.Resolver) (*controller.Allocator, string) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "controller.db"))
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	svc, err := controller.New(st, res, nil, cfg)
	if err != nil {
		cancel()
		_ = st.Close()
		tb.Fatal(err)
	}
	g := grpc.NewServer()
	grpcapi.NewServer(svc, time.Minute).Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		_ = st.Close()
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = svc.Run(ctx) })
	wg.Go(func() { _ = g.Serve(lis) })
	tb.Cleanup(func() {
		cancel()
		g.Stop()
		wg.Wait()
		_ = st.Close()
	})
	select {
	case <-svc.Loaded():
	case <-time.After(30 * time.Second):
		tb.Fatal("controller did not load its state")
	}
	return svc, lis.Addr().String()
}
