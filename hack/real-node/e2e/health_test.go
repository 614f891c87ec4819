package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
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
	nic, err := env.NICWithNetdev()
	if err != nil {
		t.Fatal(err)
	}
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
	took, err := env.FlapNetdev(ctx, nic.NetDev, 2, func(ctx context.Context, up bool) error {
		deadline := time.After(10 * time.Second)
		for {
			select {
			case l := <-lists:
				if ids, healthy := ofNIC(l); len(ids) > 0 && !slices.Contains(healthy, !up) {
					return nil
				}
			case <-deadline:
				return fmt.Errorf("%s's devices not all Healthy=%v on ListAndWatch after 10 s", nic.Name, up)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range took {
		state := map[bool]string{false: "down, devices Unhealthy", true: "up, devices Healthy"}[i%2 == 1]
		t.Logf("round %d: %s %s on ListAndWatch after %v", i/2+1, nic.NetDev, state, d.Round(time.Millisecond))
		if d > healthWithin {
			t.Errorf("round %d: %s %s after %v, want within %v", i/2+1, nic.NetDev, state, d, healthWithin)
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
