package deviceplugin

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNewServerRejectsBadConfig(t *testing.T) {
	long := "/" + strings.Repeat("d", 100)
	for _, tc := range []struct {
		name string
		cfg  ServerConfig
	}{
		{"no resource", ServerConfig{}},
		{"no domain", ServerConfig{Resource: newFakeResource("cxi")}},
		{"reserved domain", ServerConfig{Resource: newFakeResource("kubernetes.io/cxi")}},
		{"reserved subdomain", ServerConfig{Resource: newFakeResource("node.kubernetes.io/cxi")}},
		{"two slashes", ServerConfig{Resource: newFakeResource("hpe.com/cxi/x")}},
		{"upper-case domain", ServerConfig{Resource: newFakeResource("HPE.com/cxi")}},
		{"bad name", ServerConfig{Resource: newFakeResource("hpe.com/-cxi")}},
		{"name too long", ServerConfig{Resource: newFakeResource("hpe.com/" + strings.Repeat("x", 64))}},
		{"socket in a subdir", ServerConfig{Resource: newFakeResource("hpe.com/cxi"), SocketName: "a/b.sock"}},
		{"socket is kubelet's", ServerConfig{Resource: newFakeResource("hpe.com/cxi"), SocketName: "kubelet.sock"}},
		{"path too long", ServerConfig{Resource: newFakeResource("hpe.com/cxi"), PluginDir: long}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewServer(tc.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("NewServer = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestNewServerDefaults(t *testing.T) {
	s, err := NewServer(ServerConfig{Resource: newFakeResource("hpe.com/cxi")})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.SocketPath(), "/var/lib/kubelet/device-plugins/slingshot-hpe.com-cxi.sock"; got != want {
		t.Errorf("SocketPath = %q, want %q", got, want)
	}
	if s.kubeletPath != "/var/lib/kubelet/device-plugins/kubelet.sock" {
		t.Errorf("kubelet socket = %q", s.kubeletPath)
	}
	if s.backoff.Attempts != DefaultBackoff.Attempts || s.registerTimeout != DefaultRegisterTimeout || s.reregisterDelay != DefaultReregisterDelay {
		t.Errorf("defaults not applied: %+v %v %v", s.backoff, s.registerTimeout, s.reregisterDelay)
	}
	if got := defaultSocketName("example.com/gpu_x"); got != "slingshot-example.com-gpu_x.sock" {
		t.Errorf("defaultSocketName = %q", got)
	}
	if err := validateResourceName("hpe.com/compute-xlarge"); err != nil {
		t.Errorf("valid name rejected: %v", err)
	}
}

// Servers sharing a Registerer share the collectors, one series each.
func TestServersShareMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a, err := NewServer(ServerConfig{Resource: newFakeResource("example.com/a"), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewServer(ServerConfig{Resource: newFakeResource("example.com/b"), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	a.Update(testDevices())
	b.Update(testDevices()[:1])
	const want = `
# HELP slingshot_agent_deviceplugin_devices Devices advertised to the kubelet, by resource and health (healthy or unhealthy).
# TYPE slingshot_agent_deviceplugin_devices gauge
slingshot_agent_deviceplugin_devices{health="healthy",resource="example.com/a"} 4
slingshot_agent_deviceplugin_devices{health="healthy",resource="example.com/b"} 1
slingshot_agent_deviceplugin_devices{health="unhealthy",resource="example.com/a"} 0
slingshot_agent_deviceplugin_devices{health="unhealthy",resource="example.com/b"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slingshot_agent_deviceplugin_devices"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}

func TestRunAllServesEachResourceOnItsOwnSocket(t *testing.T) {
	dir := shortTempDir(t)
	k := newFakeKubelet(t, dir)
	k.start(t, true)
	var servers []*Server
	for _, name := range []string{"example.com/a", "example.com/b"} {
		s, err := NewServer(ServerConfig{Resource: newFakeResource(name), PluginDir: dir, Backoff: fastBackoff, ReregisterDelay: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		s.Update(testDevices())
		servers = append(servers, s)
	}
	if err := RunAll(t.Context(), servers[0], servers[0]); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("RunAll with a server twice = %v, want ErrInvalidConfig", err)
	}

	ctx, cancel := contextWithCancel(t)
	done := make(chan error, 1)
	go func() { done <- RunAll(ctx, servers...) }()
	got := map[string]string{}
	for range servers {
		r := recv(t, k.registered, "Register")
		got[r.req.GetResourceName()] = r.req.GetEndpoint()
	}
	want := map[string]string{"example.com/a": "slingshot-example.com-a.sock", "example.com/b": "slingshot-example.com-b.sock"}
	for name, ep := range want {
		if got[name] != ep {
			t.Errorf("resource %s registered endpoint %q, want %q", name, got[name], ep)
		}
	}
	cancel()
	if err := recv(t, done, "RunAll to return"); err != nil {
		t.Errorf("RunAll = %v", err)
	}
	for _, s := range servers {
		if _, err := os.Stat(s.SocketPath()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket %s after RunAll: %v, want removed", s.SocketPath(), err)
		}
	}
}
