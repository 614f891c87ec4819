package ipamplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
)

// BenchmarkAdd measures ADD latency with the agent's real allocator on its
// real socket, reporting p50 and p99 beside the mean:
//   - socket: the ipamwire client alone, no process (the agent's share);
//   - plugin: the slingshot-ipam binary run as a main plugin runs it;
//   - macvlan: Debian's macvlan with slingshot-ipam through libcni into a
//     pod namespace (needs root), as a runtime sees it;
//   - host-local: Debian's host-local (v1.1.1) run the same way as
//     "plugin", its store under the test's directory: the baseline of a
//     node-local IPAM plugin that allocates from a file itself.
//
// Each DEL runs with the timer stopped, so that the pool stays warm.
//
//	go test -run '^$' -bench BenchmarkAdd -benchtime 500x ./cni/ipamplugin
func BenchmarkAdd(b *testing.B) {
	b.Run("socket", func(b *testing.B) {
		a := startAgent(b)
		c := ipamwire.NewClient(a.socket, 0)
		ctx := context.Background()
		runAdds(b, func(id string) error {
			_, err := c.Add(ctx, ipamwire.AddRequest{Network: "hsn", Attachment: ipamwire.Attachment{ContainerID: id, IfName: podIf}, Pool: hsn0.Name})
			return err
		}, func(id string) error {
			return c.Del(ctx, ipamwire.DelRequest{Network: "hsn", Attachment: ipamwire.Attachment{ContainerID: id, IfName: podIf}})
		})
	})
	b.Run("plugin", func(b *testing.B) {
		a, dir := startAgent(b), buildPlugin(b)
		bin := filepath.Join(dir, "slingshot-ipam")
		conf := netConfig("1.0.0", a.socket)
		args := func(verb, id string) *invoke.Args {
			return &invoke.Args{Command: verb, ContainerID: id, NetNS: filepath.Join(dir, "no-netns"), IfName: podIf, Path: dir}
		}
		ctx := context.Background()
		runAdds(b, func(id string) error {
			_, err := invoke.ExecPluginWithResult(ctx, bin, conf, args("ADD", id), nil)
			return err
		}, func(id string) error {
			return invoke.ExecPluginWithoutResult(ctx, bin, conf, args("DEL", id), nil)
		})
	})
	b.Run("host-local", func(b *testing.B) {
		if _, err := os.Stat(filepath.Join(debianCNI, "host-local")); err != nil {
			b.Skipf("no Debian CNI plugins: %v", err)
		}
		dir := b.TempDir()
		conf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"hsn","ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.150.0.0/16"}]]}}`, filepath.Join(dir, "store"))
		args := func(verb, id string) *invoke.Args {
			return &invoke.Args{Command: verb, ContainerID: id, NetNS: filepath.Join(dir, "no-netns"), IfName: podIf, Path: debianCNI}
		}
		bin, ctx := filepath.Join(debianCNI, "host-local"), context.Background()
		runAdds(b, func(id string) error {
			_, err := invoke.ExecPluginWithResult(ctx, bin, conf, args("ADD", id), nil)
			return err
		}, func(id string) error {
			return invoke.ExecPluginWithoutResult(ctx, bin, conf, args("DEL", id), nil)
		})
	})
	b.Run("macvlan", func(b *testing.B) {
		e := newE2E(b)
		net := e.network("macvlan")
		runAdds(b, func(id string) error {
			_, err := e.add(net, id)
			return err
		}, func(id string) error { return e.del(net, id) })
	})
}

// runAdds times b.N calls of add, each followed by an untimed del, and
// reports the latency percentiles.
func runAdds(b *testing.B, add, del func(id string) error) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		if err := add(id); err != nil {
			b.Fatalf("ADD %s: %v", id, err)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if err := del(id); err != nil {
			b.Fatalf("DEL %s: %v", id, err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
}
