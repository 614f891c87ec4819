package devplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/deviceplugin"
	"github.com/slingshot-k8s/slingshot/gpu"
)

const unitRes = "hpe.com/compute-xlarge"

// serveUnits carves one NVIDIA GPU per unit with nicsPerUnit NICs over the
// rig's NICs, serves the units as the agent does (a device-plugin server
// on a socket) and returns the gRPC client the kubelet would use, and the
// units' IDs.
func serveUnits(t *testing.T, r *rig, nicsPerUnit int) (pluginapi.DevicePluginClient, []string) {
	t.Helper()
	gpus := []gpu.GPU{
		{PCIAddress: "0000:17:00.0", Vendor: gpu.NVIDIA, NUMANode: 0, Index: 0, Driver: "nvidia", DevNodes: []string{"nvidia0"}, SharedDevNodes: []string{"nvidiactl"}},
		{PCIAddress: "0000:18:00.0", Vendor: gpu.NVIDIA, NUMANode: 0, Index: 1, Driver: "nvidia", DevNodes: []string{"nvidia1"}, SharedDevNodes: []string{"nvidiactl"}},
	}
	nics := []gpu.NIC{{Name: "cxi0", PCIAddress: "0000:21:00.0", NUMANode: 0}, {Name: "cxi1", PCIAddress: "0000:22:00.0", NUMANode: 0}}
	mt := gpu.MachineType{Name: "compute-xlarge", GPU: gpu.GPUSpec{Type: string(gpu.NVIDIA), Count: 1}, NICsPerUnit: nicsPerUnit}
	c, err := gpu.Carve(gpus, nics, mt, gpu.CarveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Units) != 2 {
		t.Fatalf("%d units carved, want 2: %+v", len(c.Units), c.Excluded)
	}
	u := &unitResource{name: unitRes, b: r.b, carving: c, healthy: func(string) bool { return true }, mode: config.ModeReady,
		payload: gpu.PayloadOptions{DevRoot: "/dev", Select: gpu.ByIndex}}
	r.b.resolve[unitRes] = u.resolve

	// A short directory: a unix socket's path must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "units")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	srv, err := deviceplugin.NewServer(deviceplugin.ServerConfig{Resource: u, PluginDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Update(u.devices())
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("device plugin server: %v", err)
		}
	})
	// No kubelet listens: the server serves its socket and retries its
	// registration, which these calls do not need.
	waitFor(t, "the unit server serves its socket", func() bool { return srv.Status().Serving })
	conn, err := grpc.NewClient("unix://"+srv.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var ids []string
	for _, unit := range c.Units {
		ids = append(ids, unit.ID)
	}
	return pluginapi.NewDevicePluginClient(conn), ids
}

// TestUnitWithoutNICsGetsNoSlingshot: a GPU machine type of nicsPerUnit 0
// carves units with no NIC. The kubelet's Allocate answer for one holds
// its GPU and nothing of Slingshot (no SLINGSHOT_* variable, no
// /var/run/slingshot mount, no hpe.com/cxi CDI device, no /dev/cxiN), and
// its PreStartContainer does nothing CXI-related: no lease, no record, no
// service, no spec. A unit with a NIC still gets all of it. On a real H100
// node the NIC-less unit got SLINGSHOT_DEVICES= (empty), SLINGSHOT_TCS, the
// CDI device and the mount, and its PreStart leased a VNI for nothing
// (issue 32).
func TestUnitWithoutNICsGetsNoSlingshot(t *testing.T) {
	for _, tc := range []struct {
		name        string
		nicsPerUnit int
		slingshot   bool
	}{
		{"nicsPerUnit 0", 0, false},
		{"nicsPerUnit 1", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			r := newRig(t, dir, nil, fakeNetns{"uid-g": 4026532001})
			client, ids := serveUnits(t, r, tc.nicsPerUnit)
			id := ids[0]

			resp, err := client.Allocate(t.Context(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{id}}}})
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			got := resp.GetContainerResponses()[0]
			if got.GetEnvs()["NVIDIA_VISIBLE_DEVICES"] != "0" || !hasDevice(got, "/dev/nvidia0") {
				t.Fatalf("Allocate %+v: want the unit's GPU", got)
			}
			var slingshot []string
			for k, v := range got.GetEnvs() {
				if strings.HasPrefix(k, "SLINGSHOT_") {
					slingshot = append(slingshot, k+"="+v)
				}
			}
			for _, m := range got.GetMounts() {
				if m.GetContainerPath() == ContainerDir {
					slingshot = append(slingshot, "mount "+m.GetContainerPath())
				}
			}
			for _, d := range got.GetCdiDevices() {
				if strings.HasPrefix(d.GetName(), res+"=") {
					slingshot = append(slingshot, "CDI "+d.GetName())
				}
			}
			for _, d := range got.GetDevices() {
				if strings.HasPrefix(d.GetContainerPath(), "/dev/cxi") {
					slingshot = append(slingshot, "device "+d.GetContainerPath())
				}
			}
			// With a NIC: SLINGSHOT_DEVICES, SLINGSHOT_TCS, the mount, the
			// CDI device and /dev/cxi0; without, none of them.
			if want := map[bool]int{true: 5}[tc.slingshot]; len(slingshot) != want {
				t.Fatalf("Allocate gave %v of Slingshot, want %d things", slingshot, want)
			}
			if tc.slingshot && got.GetEnvs()[engine.EnvDevices] != "cxi0" {
				t.Fatalf("%s = %q, want the unit's NIC", engine.EnvDevices, got.GetEnvs()[engine.EnvDevices])
			}

			r.pods.set(&podwatch.Pod{Namespace: "ns", Name: "g", UID: "uid-g",
				Containers: map[string]map[string][]string{"main": {unitRes: {id}}}})
			if _, err := client.PreStartContainer(t.Context(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{id}}); err != nil {
				t.Fatalf("PreStartContainer: %v", err)
			}
			specs, err := os.ReadDir(filepath.Join(dir, "cdi"))
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			bound := r.has("ns/g") || len(r.leaser.held) != 0 || len(specs) != 0 || len(r.services(t, "cxi0"))+len(r.services(t, "cxi1")) != 0
			if bound != tc.slingshot {
				t.Fatalf("after PreStart: recorded %v, leases %v, %d CDI specs, services %d+%d; want a bind %v",
					r.has("ns/g"), r.leaser.held, len(specs), len(r.services(t, "cxi0")), len(r.services(t, "cxi1")), tc.slingshot)
			}
		})
	}
}

func hasDevice(resp *pluginapi.ContainerAllocateResponse, path string) bool {
	for _, d := range resp.GetDevices() {
		if d.GetContainerPath() == path {
			return true
		}
	}
	return false
}
