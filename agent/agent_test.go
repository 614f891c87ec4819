package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/slingshot-k8s/slingshot/agent/netns"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
)

func TestPolicyFrom(t *testing.T) {
	c, err := config.Parse([]byte("trafficClasses: [BULK_DATA, DEDICATED_ACCESS]\nlimits: {TXQs: {max: 64, res: 2}, TLEs: {max: 0, res: 0}}\nmembership: {fallbackUID: 1000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := policyFrom(c)
	if p.defaults.TCs != cxi.TCBulkData|cxi.TCDedicatedAccess {
		t.Errorf("tcs = %v", p.defaults.TCs)
	}
	if l := p.defaults.Limits; l == nil || l.TXQs != (cxi.Limit{Max: 64, Res: 2}) || l.EQs != cxi.DefaultLimits().EQs {
		t.Errorf("limits = %+v", l)
	}
	if p.jobs == nil {
		t.Error("no job policy")
	}
	if d := policyFrom(config.Default()); d.defaults.Limits != nil || d.defaults.TCs != cxi.DefaultTrafficClasses {
		t.Errorf("default policy = %+v", d)
	}
}

func TestInventory(t *testing.T) {
	nics := []sysfs.NIC{
		{Name: "cxi0", Path: "class/cxi/cxi0", PCIAddress: "0000:21:00.0", NUMANode: 0, Healthy: true, NetDev: &sysfs.NetDev{Name: "hsn1"}},
		{Name: "cxi1", Path: "class/cxi/cxi1", PCIAddress: "0000:41:00.0", NUMANode: -1, Healthy: false},
	}
	inv := newInventory(nics)
	if !inv.healthy("cxi0") || inv.healthy("cxi1") {
		t.Fatal("discovered health not kept")
	}
	if inv.setHealth("cxi0", true, "") {
		t.Error("unchanged health reported as a change")
	}
	if !inv.setHealth("cxi1", true, "") || !inv.healthy("cxi1") {
		t.Error("health change not applied")
	}
	if inv.setHealth("cxi9", false, "x") {
		t.Error("unknown NIC reported as a change")
	}
	ts := inv.healthTargets("/sys")
	if ts[0].DeviceDir != "/sys/class/cxi/cxi0/device" || ts[0].NetDir != "/sys/class/net/hsn1" || ts[1].NetDev != "" {
		t.Fatalf("targets = %+v", ts)
	}
}

// versionRuntime answers only the CRI Version call.
type versionRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (versionRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fakerd", RuntimeVersion: "1.2.3", RuntimeApiVersion: "v1"}, nil
}

func TestNewNetnsFinder(t *testing.T) {
	procRoot, err := os.MkdirTemp("", "proc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(procRoot) })
	// The host's root seen through PID 1, with a runtime socket in it.
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, versionRuntime{})
	hostSock := serveUnder(t, procRoot, "/run/rt/cri.sock", srv)

	find := func(socket string) (netns.Finder, string) {
		t.Helper()
		var logs bytes.Buffer
		f, conn, err := newNetnsFinder(t.Context(), Options{ProcRoot: procRoot, CRISocket: socket}, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatalf("newNetnsFinder(%q): %v", socket, err)
		}
		if conn != nil {
			t.Cleanup(func() { _ = conn.Close() })
		}
		return f, logs.String()
	}

	if f, logs := find(CRINone); f != (netns.Proc{Root: procRoot}) || !strings.Contains(logs, "/proc only") {
		t.Errorf("none: %#v, logs %q", f, logs)
	}

	f, logs := find("/run/rt/cri.sock")
	fb, ok := f.(netns.Fallback)
	if !ok {
		t.Fatalf("a socket under the host root: %#v, want a Fallback", f)
	}
	if cri, ok := fb.First.(netns.CRI); !ok || cri.HostRoot != filepath.Join(procRoot, "1", "root") || cri.ProcRoot != procRoot || fb.Second != (netns.Proc{Root: procRoot}) {
		t.Errorf("fallback = %#v", fb)
	}
	if !strings.Contains(logs, "socket="+hostSock) || !strings.Contains(logs, "runtime=fakerd") {
		t.Errorf("logs %q lack the socket and the runtime", logs)
	}

	f, logs = find("/nonexistent/cri.sock")
	if _, ok := f.(netns.Fallback); !ok || !strings.Contains(logs, "CRI socket not found") || !strings.Contains(logs, "does not answer") {
		t.Errorf("a missing socket: %#v, logs %q", f, logs)
	}

	// Auto: the defaults, as they are here or under the (fake) host root.
	_, onHost := netns.FindCRISocket("", netns.DefaultCRISockets...)
	f, logs = find("")
	if _, isProc := f.(netns.Proc); isProc == onHost {
		t.Errorf("auto with a runtime socket here %v: %#v, logs %q", onHost, f, logs)
	}
}

// serveUnder serves srv on a unix socket at the host path p under the
// fake host root procRoot/1/root, until the test ends.
func serveUnder(t *testing.T, procRoot, p string, srv *grpc.Server) string {
	t.Helper()
	sock := filepath.Join(procRoot, "1", "root", p)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return sock
}

// In auto mode a default socket whose server is no CRI runtime (Docker's
// containerd beside CRI-O) is passed over for the next one that answers.
func TestNewNetnsFinderAutoSkipsNonCRISocket(t *testing.T) {
	if _, onHost := netns.FindCRISocket("", netns.DefaultCRISockets...); onHost {
		t.Skip("this machine has a real runtime socket at a default path; auto mode would find it first")
	}
	procRoot, err := os.MkdirTemp("", "proc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(procRoot) })
	// containerd's default path: a gRPC server without the RuntimeService.
	serveUnder(t, procRoot, netns.DefaultCRISockets[0], grpc.NewServer())
	crio := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(crio, versionRuntime{})
	crioSock := serveUnder(t, procRoot, netns.DefaultCRISockets[1], crio)

	var logs bytes.Buffer
	f, conn, err := newNetnsFinder(t.Context(), Options{ProcRoot: procRoot}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if conn != nil {
		defer conn.Close()
	}
	if _, ok := f.(netns.Fallback); !ok {
		t.Fatalf("finder %#v, want the CRI with /proc as fallback; logs:\n%s", f, logs.String())
	}
	if !strings.Contains(logs.String(), "trying the next") || !strings.Contains(logs.String(), "socket="+crioSock) {
		t.Errorf("logs do not show the first socket passed over and CRI-O's taken:\n%s", logs.String())
	}
}
