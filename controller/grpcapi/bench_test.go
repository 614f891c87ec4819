package grpcapi

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkAcquireGRPC measures durable acquires (each a new lease, each
// acknowledged only after its group commit is on disk) through gRPC on
// loopback from 8 concurrent clients, each with its own connection. It
// reports acquires/s and the p99 latency. Each run leases b.N VNIs, so keep
// b.N under the range's 64,509 (the default 1 s benchtime does).
func BenchmarkAcquireGRPC(b *testing.B) {
	const clients = 8
	_, svc := serve(b, controller.Config{}, true)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	NewServer(svc, time.Minute).Register(g)
	go g.Serve(lis)
	defer g.Stop()
	var apis []apiv1.ControllerClient
	for range clients {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		apis = append(apis, apiv1.NewControllerClient(conn))
	}
	var next atomic.Int64
	lat := make([][]time.Duration, clients)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				t0 := time.Now()
				_, err := apis[c].AcquireJobVNI(b.Context(), &apiv1.AcquireJobVNIRequest{
					Pod: &apiv1.PodRef{Namespace: "bench", Name: fmt.Sprintf("p%d", i), Uid: fmt.Sprintf("u%d", i)}, Node: "n1"})
				if err != nil {
					b.Error(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), "acquires/s")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	}
}
