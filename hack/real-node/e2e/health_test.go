package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// healthWithin is how soon a NIC's netdev going down or up must reach the
// device plugin's ListAndWatch (issue 34): well under the agent's 10 s
// sysfs poll, so only the netlink link event can meet it.
const healthWithin = 2 * time.Second

// TestLinkEventReachesListAndWatchWithin2s: a NIC's hsn netdev (a real
// veth of the node) set down with ip link, its mock sysfs showing what the
// kernel then shows a moment before, makes every device of that NIC
// Unhealthy on a ListAndWatch stream of the agent's socket within 2 s, and
// Healthy again within 2 s of coming up; twice. The stream is the test's
// own, beside the kubelet's, which the agent keeps serving.
func TestLinkEventReachesListAndWatchWithin2s(t *testing.T) {
	ctx := t.Context()
	i := slices.IndexFunc(env.Machine.NICs, func(n mocksysfs.NIC) bool { return !n.VF && n.NetDev != "" })
	if i < 0 {
		t.Fatal("the mock machine has no NIC with an hsn netdev")
	}
	nic := env.Machine.NICs[i]
	lists, err := watchDevices(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	ofNIC := func(l *pluginapi.ListAndWatchResponse) (ids []string, healthy []bool) {
		for _, d := range l.Devices {
			if d.ID == nic.PCIAddress || strings.HasPrefix(d.ID, nic.PCIAddress+"-") {
				ids, healthy = append(ids, d.ID), append(healthy, d.Health == pluginapi.Healthy)
			}
		}
		return ids, healthy
	}
	select {
	case first := <-lists:
		if ids, healthy := ofNIC(first); len(ids) == 0 || slices.Contains(healthy, false) {
			t.Fatalf("first list: %s's devices %v healthy %v, want some, all healthy", nic.Name, ids, healthy)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no list on the agent's ListAndWatch")
	}
	t.Cleanup(func() {
		_ = mocksysfs.SetOperState(env.Machine.Dir, nic.NetDev, true)
		_ = exec.Command("ip", "link", "set", nic.NetDev, "up").Run()
	})
	for round := 1; round <= 2; round++ {
		for _, up := range []bool{false, true} {
			state := map[bool]string{false: "down", true: "up"}[up]
			if err := mocksysfs.SetOperState(env.Machine.Dir, nic.NetDev, up); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if out, err := exec.CommandContext(ctx, "ip", "link", "set", nic.NetDev, state).CombinedOutput(); err != nil {
				t.Fatalf("ip link set %s %s: %v: %s", nic.NetDev, state, err, out)
			}
			deadline := time.After(10 * time.Second)
		wait:
			for {
				select {
				case l := <-lists:
					ids, healthy := ofNIC(l)
					if len(ids) > 0 && !slices.Contains(healthy, !up) {
						break wait
					}
				case <-deadline:
					t.Fatalf("round %d: %s set %s: %s's devices not %s on ListAndWatch after 10 s", round, nic.NetDev, state, nic.Name,
						map[bool]string{true: "Healthy", false: "Unhealthy"}[up])
				}
			}
			took := time.Since(start)
			t.Logf("round %d: %s set %s: %s's devices %s on ListAndWatch after %v", round, nic.NetDev, state, nic.Name,
				map[bool]string{true: "Healthy", false: "Unhealthy"}[up], took.Round(time.Millisecond))
			if took > healthWithin {
				t.Errorf("round %d: %s set %s reached ListAndWatch after %v, want within %v", round, nic.NetDev, state, took, healthWithin)
			}
		}
	}
}

// watchDevices opens a ListAndWatch stream of the agent's NIC resource on
// its socket in the kubelet's device-plugins directory and sends each list
// on the channel until ctx ends.
func watchDevices(ctx context.Context, t *testing.T) (<-chan *pluginapi.ListAndWatchResponse, error) {
	socks, err := filepath.Glob(filepath.Join(pluginapi.DevicePluginPath, "*.sock"))
	if err != nil {
		return nil, err
	}
	for _, sock := range socks {
		if filepath.Base(sock) == filepath.Base(pluginapi.KubeletSocket) {
			continue
		}
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			continue
		}
		t.Cleanup(func() { _ = conn.Close() })
		stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			continue
		}
		first, err := stream.Recv()
		if err != nil || len(first.Devices) == 0 {
			continue
		}
		lists := make(chan *pluginapi.ListAndWatchResponse, 16)
		lists <- first
		go func() {
			for {
				l, err := stream.Recv()
				if err != nil {
					return
				}
				select {
				case lists <- l:
				case <-ctx.Done():
					return
				}
			}
		}()
		return lists, nil
	}
	return nil, fmt.Errorf("no device-plugin socket of the agent with devices among %v", socks)
}
