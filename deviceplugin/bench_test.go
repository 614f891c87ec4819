package deviceplugin

import (
	"slices"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// reportPercentiles adds p50, p99 and max of lat to the benchmark's output
// in the given unit.
func reportPercentiles(b *testing.B, lat []time.Duration, unit time.Duration, suffix string) {
	b.Helper()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		i := min(int(q*float64(len(lat))), len(lat)-1)
		return float64(lat[i]) / float64(unit)
	}
	b.ReportMetric(at(0.50), "p50-"+suffix)
	b.ReportMetric(at(0.99), "p99-"+suffix)
	b.ReportMetric(float64(lat[len(lat)-1])/float64(unit), "max-"+suffix)
}

// BenchmarkAllocateRoundTrip measures Allocate as the kubelet sees it: a
// gRPC call over the plugin's real unix socket, through the device checks
// and the Resource, and back. It reports per-call p50/p99/max in µs.
func BenchmarkAllocateRoundTrip(b *testing.B) {
	h := newHarness(b, nil)
	h.srv.Update(testDevices())
	h.startAndRegister()
	client := h.kubelet.client(testEndpoint)
	req := allocReq([]string{"dev0", "dev1"})
	ctx := b.Context()
	var lat []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		resp, err := client.Allocate(ctx, req)
		lat = append(lat, time.Since(start))
		if err != nil || len(resp.GetContainerResponses()) != 1 {
			b.Fatalf("Allocate = %v, %v", resp, err)
		}
	}
	reportPercentiles(b, lat, time.Microsecond, "µs")
}

// BenchmarkReregisterAfterKubeletRestart measures, per kubelet restart
// (stop, clean the directory, listen on kubelet.sock again), the time from
// kubelet.sock being created to the kubelet receiving Register. ns/op also
// counts the restart itself; the p50/p99/max figures are the latency the
// issue bounds at one second.
func BenchmarkReregisterAfterKubeletRestart(b *testing.B) {
	h := newHarness(b, func(c *ServerConfig) {
		// Production backoff, so the figure includes the real retry path.
		c.Backoff = backoff.Policy{Initial: DefaultBackoff.Initial, Max: DefaultBackoff.Max, Factor: 2, Jitter: 0.2, Attempts: 15}
		c.ReregisterDelay = DefaultReregisterDelay
	})
	h.srv.Update(testDevices())
	h.startAndRegister()
	recv(b, h.kubelet.lists, "initial list")
	var lat []time.Duration
	for b.Loop() {
		h.kubelet.restart(b)
		reg := recv(b, h.kubelet.registered, "Register after restart")
		lat = append(lat, reg.at.Sub(h.kubelet.lastListenAt()))
		recv(b, h.kubelet.lists, "list after restart")
	}
	reportPercentiles(b, lat, time.Millisecond, "ms")
}
