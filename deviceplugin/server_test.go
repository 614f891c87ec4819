package deviceplugin

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// reregisterBudget is the bound on the time from kubelet.sock
// appearing to the kubelet receiving Register.
const reregisterBudget = time.Second

func TestRegisterAsksForPreStartAndPreferredAllocation(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Update(testDevices())
	reg := h.startAndRegister()

	if got := reg.req.GetVersion(); got != pluginapi.Version {
		t.Errorf("Version = %q, want %q", got, pluginapi.Version)
	}
	if got := reg.req.GetResourceName(); got != testResource {
		t.Errorf("ResourceName = %q, want %q", got, testResource)
	}
	if got := reg.req.GetEndpoint(); got != testEndpoint {
		t.Errorf("Endpoint = %q, want %q", got, testEndpoint)
	}
	opts := reg.req.GetOptions()
	if !opts.GetPreStartRequired() || !opts.GetGetPreferredAllocationAvailable() {
		t.Errorf("Options = %v, want PreStartRequired and GetPreferredAllocationAvailable", opts)
	}
	client := h.kubelet.client(testEndpoint)
	got, err := client.GetDevicePluginOptions(t.Context(), &pluginapi.Empty{})
	if err != nil {
		t.Fatalf("GetDevicePluginOptions: %v", err)
	}
	if !got.GetPreStartRequired() || !got.GetGetPreferredAllocationAvailable() {
		t.Errorf("GetDevicePluginOptions = %v, want both options", got)
	}
	if n := testutil.ToFloat64(h.srv.registeredOK); n != 1 {
		t.Errorf("registrations{result=success} = %v, want 1", n)
	}
	if st := h.srv.Status(); !st.Serving || !st.Registered || st.LastError != nil {
		t.Errorf("Status = %+v, want serving and registered", st)
	}
}

// health flattens a device list for comparison.
func health(devs []*pluginapi.Device) []string {
	var out []string
	for _, d := range devs {
		var nodes []string
		for _, n := range d.GetTopology().GetNodes() {
			nodes = append(nodes, "numa"+string(rune('0'+n.GetID())))
		}
		out = append(out, d.GetID()+"="+d.GetHealth()+"@"+strings.Join(nodes, "+"))
	}
	return out
}

func TestListAndWatchSendsInitialListAndEveryUpdate(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Update(testDevices())
	h.startAndRegister()

	want := []string{"dev0=Healthy@numa0", "dev1=Healthy@numa0", "dev2=Healthy@numa1", "dev3=Healthy@numa1"}
	if got := health(recv(t, h.kubelet.lists, "initial list")); !slices.Equal(got, want) {
		t.Fatalf("initial list = %v, want %v", got, want)
	}

	devs := testDevices()
	devs[2].Healthy = false
	h.srv.Update(devs)
	want[2] = "dev2=Unhealthy@numa1"
	if got := health(recv(t, h.kubelet.lists, "list after dev2 failed")); !slices.Equal(got, want) {
		t.Fatalf("after failure = %v, want %v", got, want)
	}

	// A repeated list changes nothing and is not sent again.
	before := h.srv.currentDevices().version
	h.srv.Update(devs)
	if after := h.srv.currentDevices().version; after != before {
		t.Errorf("unchanged Update moved the version from %d to %d", before, after)
	}

	// Unhealthy devices recover: the kubelet hears about that too.
	h.srv.Update(testDevices())
	want[2] = "dev2=Healthy@numa1"
	if got := health(recv(t, h.kubelet.lists, "list after dev2 recovered")); !slices.Equal(got, want) {
		t.Fatalf("after recovery = %v, want %v", got, want)
	}

	// A device that disappears is no longer advertised.
	h.srv.Update(testDevices()[:3])
	if got := health(recv(t, h.kubelet.lists, "list after dev3 removed")); !slices.Equal(got, want[:3]) {
		t.Fatalf("after removal = %v, want %v", got, want[:3])
	}

	m := h.srv.m
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"health_changes{unhealthy}", testutil.ToFloat64(m.healthChanges.WithLabelValues(testResource, healthUnhealthy)), 1},
		{"health_changes{healthy}", testutil.ToFloat64(m.healthChanges.WithLabelValues(testResource, healthHealthy)), 1},
		{"devices{healthy}", testutil.ToFloat64(m.devices.WithLabelValues(testResource, healthHealthy)), 3},
		{"devices{unhealthy}", testutil.ToFloat64(m.devices.WithLabelValues(testResource, healthUnhealthy)), 0},
		{"listandwatch_streams", testutil.ToFloat64(h.srv.streamsGauge), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// The agent nudges the kubelet into rewriting its device checkpoint by
// sending the unchanged list again; Update of the same list stays silent.
func TestResendSendsTheUnchangedListAgain(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Update(testDevices())
	h.startAndRegister()
	first := health(recv(t, h.kubelet.lists, "initial list"))

	h.srv.Update(testDevices())
	h.srv.Resend()
	if got := health(recv(t, h.kubelet.lists, "list after Resend")); !slices.Equal(got, first) {
		t.Fatalf("resent list = %v, want the unchanged %v", got, first)
	}
	// Exactly one message came of the Update and the Resend: the next one
	// the kubelet sees is the change below, not a second copy.
	devs := testDevices()
	devs[0].Healthy = false
	h.srv.Update(devs)
	if got := health(recv(t, h.kubelet.lists, "list after a change")); got[0] != "dev0=Unhealthy@numa0" {
		t.Fatalf("next list = %v, want the change, not another copy", got)
	}
}

func TestKubeletRestartRegistersAgainQuickly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		clean bool // the real kubelet removes the plugin sockets first
	}{
		{"kubelet cleans plugin dir", true},
		{"only kubelet.sock recreated", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Long waits between attempts: only the new kubelet.sock can
			// make the server register again in time.
			h := newHarness(t, func(c *ServerConfig) {
				c.Backoff = backoff.Policy{Initial: time.Hour, Attempts: 10}
			})
			h.srv.Update(testDevices())
			h.startAndRegister()
			recv(t, h.kubelet.lists, "initial list")

			for i := range 3 {
				h.kubelet.stop()
				h.kubelet.start(t, tc.clean)
				reg := recv(t, h.kubelet.registered, "Register after kubelet restart")
				latency := reg.at.Sub(h.kubelet.lastListenAt())
				t.Logf("restart %d: kubelet.sock created → Register received in %v", i+1, latency)
				if latency > reregisterBudget {
					t.Errorf("re-registration took %v, want ≤ %v", latency, reregisterBudget)
				}
				if got := recv(t, h.kubelet.lists, "list after restart"); len(got) != 4 {
					t.Errorf("list after restart has %d devices, want 4", len(got))
				}
			}
			if _, err := os.Stat(h.srv.SocketPath()); err != nil {
				t.Errorf("plugin socket: %v", err)
			}
		})
	}
}

// A killed kubelet leaves kubelet.sock behind. When the next kubelet
// replaces it after the server has looked at it but before the server
// connects, the server registers with the new kubelet: it must know that
// it did, and not register again while that kubelet holds the connection
// (a real kubelet refuses that Register and is then stuck; see
// fakeKubelet).
func TestKubeletReplacedWhileConnectingGetsOneRegister(t *testing.T) {
	h := newHarness(t, func(c *ServerConfig) {
		// Retries only when kubelet.sock is created.
		c.Backoff = backoff.Policy{Initial: time.Hour, Attempts: 2}
	})
	var armed atomic.Bool
	dialing, proceed := make(chan struct{}), make(chan struct{})
	h.srv.dial = func(ctx context.Context, path string) (net.Conn, error) {
		if armed.CompareAndSwap(true, false) {
			select {
			case dialing <- struct{}{}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			select {
			case <-proceed:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return dialUnix(ctx, path)
	}
	h.srv.Update(testDevices())
	h.startAndRegister()
	recv(t, h.kubelet.lists, "initial list")

	armed.Store(true)
	h.kubelet.crash()
	// The stream has ended: the server registers again and is about to
	// connect to the dead kubelet's socket. The next kubelet starts now.
	recv(t, dialing, "the server to connect to kubelet.sock")
	h.kubelet.start(t, true)
	close(proceed)
	recv(t, h.kubelet.registered, "Register with the new kubelet")
	recv(t, h.kubelet.lists, "list for the new kubelet")

	waitUntil(t, "the registration to settle, or a refused Register", func() bool {
		st := h.srv.Status()
		return (st.Registered && !st.Registering) || h.kubelet.refusedCount() > 0
	})
	if n := h.kubelet.refusedCount(); n != 0 {
		t.Fatalf("kubelet refused %d Register calls as already connected", n)
	}
	select {
	case <-h.kubelet.registered:
		t.Error("the new kubelet got a second Register")
	default:
	}
}

// Someone other than a restarting kubelet removes the plugin's socket. The
// server serves a new one at the path, keeps serving the connection the
// kubelet holds to the old one, and does not register while the kubelet
// holds it (the kubelet would refuse: see fakeKubelet). When the kubelet
// drops the plugin, the server registers and the kubelet connects to the
// new socket.
func TestOwnSocketRemovedServesAgainAndKeepsKubeletConnection(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Update(testDevices())
	h.startAndRegister()
	recv(t, h.kubelet.lists, "initial list")
	old := h.kubelet.client(testEndpoint)
	oldID, err := statID(h.srv.SocketPath())
	if err != nil {
		t.Fatal(err)
	}

	if err := os.Remove(h.srv.SocketPath()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a new socket at the path", func() bool {
		id, err := statID(h.srv.SocketPath())
		return err == nil && id != oldID && h.srv.Status().Serving
	})
	if n := testutil.ToFloat64(h.srv.m.reregistrations.WithLabelValues(testResource, reasonSocketRemoved)); n != 1 {
		t.Errorf("reregistrations{socket_removed} = %v, want 1", n)
	}
	// The kubelet's connection to the removed socket still answers.
	resp, err := old.Allocate(t.Context(), allocReq([]string{"dev1"}))
	if err != nil || len(resp.GetContainerResponses()) != 1 {
		t.Fatalf("Allocate on the kubelet's connection to the removed socket = %v, %v", resp, err)
	}
	if st := h.srv.Status(); !st.Registered || st.Registering {
		t.Errorf("Status = %+v, want registered and not registering", st)
	}

	if !h.kubelet.endStream(testEndpoint) {
		t.Fatal("no endpoint to drop")
	}
	recv(t, h.kubelet.registered, "Register after the kubelet dropped the plugin")
	recv(t, h.kubelet.lists, "list from the new socket")
	resp, err = h.kubelet.client(testEndpoint).Allocate(t.Context(), allocReq([]string{"dev1"}))
	if err != nil || len(resp.GetContainerResponses()) != 1 {
		t.Fatalf("Allocate on the new socket = %v, %v", resp, err)
	}

	// Both gRPC servers are gone when Run returns.
	if err := h.stop(); err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	h.kubelet.stop()
	checkNoLeaks(t)
}

func TestKubeletEndingStreamRegistersAgain(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Update(testDevices())
	h.startAndRegister()
	recv(t, h.kubelet.lists, "initial list")

	for i := range 2 {
		if !h.kubelet.endStream(testEndpoint) {
			t.Fatal("no endpoint to drop")
		}
		recv(t, h.kubelet.registered, "Register after the stream ended")
		if got := recv(t, h.kubelet.lists, "list on the new stream"); len(got) != 4 {
			t.Fatalf("list on new stream has %d devices, want 4", len(got))
		}
		if n := testutil.ToFloat64(h.srv.m.reregistrations.WithLabelValues(testResource, reasonStreamEnded)); n != float64(i+1) {
			t.Errorf("reregistrations{stream_ended} = %v, want %d", n, i+1)
		}
	}
}

// The kubelet may drop the plugin's new connection before the Register
// call that made it has returned. The server must not take that
// registration's late success for a live one and stay unregistered.
func TestKubeletDroppingStreamBeforeRegisterReturnsRegistersAgain(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Update(testDevices())
	h.startAndRegister()
	recv(t, h.kubelet.lists, "initial list")

	ended := func() float64 {
		return testutil.ToFloat64(h.srv.m.reregistrations.WithLabelValues(testResource, reasonStreamEnded))
	}
	proceed := make(chan struct{})
	h.kubelet.onNextReply(func(endpoint string) {
		// Once the plugin has sent its list on the new stream, the
		// kubelet drops it, and the server's re-registration timer for
		// that end fires, all while this Register has not returned.
		select {
		case <-h.kubelet.lists:
		case <-t.Context().Done():
			return
		}
		h.kubelet.endStream(endpoint)
		select {
		case <-proceed:
		case <-t.Context().Done():
		}
	})
	if !h.kubelet.endStream(testEndpoint) {
		t.Fatal("no endpoint to drop")
	}
	waitUntil(t, "the server to decide to register again for the second end", func() bool { return ended() == 2 })
	close(proceed)
	recv(t, h.kubelet.registered, "the Register whose stream was dropped")
	recv(t, h.kubelet.registered, "Register after the dropped one")
	waitUntil(t, "the registration to settle", func() bool {
		st := h.srv.Status()
		return st.Registered && !st.Registering
	})
	if h.kubelet.client(testEndpoint) == nil {
		t.Error("the kubelet holds no connection to the plugin")
	}
}

func TestKubeletAbsentRetriesBoundedThenRegistersWhenItAppears(t *testing.T) {
	var waits []time.Duration
	h := newHarness(t, func(c *ServerConfig) {
		c.Backoff = backoff.Policy{Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond, Factor: 2, Attempts: 4,
			Wait: func(ctx context.Context, d time.Duration) error {
				waits = append(waits, d) // only the registration goroutine calls it
				// Really wait: right after kubelet.sock appears, attempts
				// must be spread over time to outlast the moment between
				// the kubelet's bind and listen.
				return backoff.Sleep(ctx, d)
			}}
	})
	h.run()
	// Only a finished registration that failed sets LastError here.
	waitUntil(t, "the registration to fail", func() bool { return h.srv.Status().LastError != nil })
	if n := testutil.ToFloat64(h.srv.registerFailed); n != 4 {
		t.Errorf("registrations{failure} = %v, want 4", n)
	}
	if want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}; !slices.Equal(waits, want) {
		t.Errorf("backoff waits = %v, want %v", waits, want)
	}
	if st := h.srv.Status(); st.Registered || !errors.Is(st.LastError, fs.ErrNotExist) {
		t.Errorf("Status = %+v, want unregistered with a missing kubelet socket", st)
	}

	h.kubelet.start(t, false)
	reg := recv(t, h.kubelet.registered, "Register once the kubelet is up")
	t.Logf("kubelet.sock created → Register received in %v", reg.at.Sub(h.kubelet.lastListenAt()))
	waitUntil(t, "the server to see its registration succeed", h.registered)
	if n := testutil.ToFloat64(h.srv.registeredOK); n != 1 {
		t.Errorf("registrations{success} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(h.srv.m.reregistrations.WithLabelValues(testResource, reasonKubeletRestart)); n != 1 {
		t.Errorf("reregistrations{kubelet_restart} = %v, want 1", n)
	}
}

func TestKubeletAppearingCutsBackoffWaitShort(t *testing.T) {
	h := newHarness(t, func(c *ServerConfig) {
		c.Backoff = backoff.Policy{Initial: time.Hour, Attempts: 5}
	})
	h.run()
	// The first attempt has failed: the server is in its hour-long wait.
	waitUntil(t, "a failed attempt", func() bool { return testutil.ToFloat64(h.srv.registerFailed) >= 1 })
	h.kubelet.start(t, false)
	reg := recv(t, h.kubelet.registered, "Register once the kubelet is up")
	latency := reg.at.Sub(h.kubelet.lastListenAt())
	t.Logf("kubelet.sock created during a 1h backoff wait → Register received in %v", latency)
	if latency > reregisterBudget {
		t.Errorf("registration took %v, want ≤ %v", latency, reregisterBudget)
	}
}

func TestShutdownRemovesSocketAndStopsGoroutines(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Update(testDevices())
	h.startAndRegister()
	recv(t, h.kubelet.lists, "initial list")

	if err := h.stop(); err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	if _, err := os.Stat(h.srv.SocketPath()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after shutdown: %v, want it removed", err)
	}
	if st := h.srv.Status(); st.Serving || st.Registered {
		t.Errorf("Status after shutdown = %+v", st)
	}
	h.kubelet.stop()
	checkNoLeaks(t)
	// A stopped server can run again.
	h.kubelet.start(t, true)
	h.run()
	recv(t, h.kubelet.registered, "Register after a second Run")
}

func TestRunTwiceIsRefused(t *testing.T) {
	h := newHarness(t, nil)
	h.startAndRegister()
	if err := h.srv.Run(t.Context()); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("second Run = %v, want ErrAlreadyRunning", err)
	}
}

func TestPluginDirMovedIsCreatedAgain(t *testing.T) {
	h := newHarness(t, nil)
	h.startAndRegister()
	h.kubelet.stop()
	// Rename rather than remove: the server would race RemoveAll by
	// serving its socket again in the half-removed directory.
	moved := h.dir + "-moved"
	if err := os.Rename(h.dir, moved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(moved) })
	// Only the server makes the directory again, and its socket in it.
	waitUntil(t, "the server to serve in a new plugin dir", func() bool {
		_, err := os.Stat(filepath.Join(h.dir, testEndpoint))
		return err == nil && h.srv.Status().Serving
	})
	h.kubelet.start(t, false)
	recv(t, h.kubelet.registered, "Register in the new directory")
	if _, err := os.Stat(filepath.Join(h.dir, testEndpoint)); err != nil {
		t.Errorf("socket in new dir: %v", err)
	}
}

func TestLiveSocketOfAnotherServerIsNotReplaced(t *testing.T) {
	h := newHarness(t, func(c *ServerConfig) {
		c.Backoff = backoff.Policy{Initial: time.Millisecond, Attempts: 2}
	})
	other, err := net.Listen("unix", h.srv.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	h.run()
	if err := h.wait(); !errors.Is(err, ErrSocketInUse) {
		t.Errorf("Run = %v, want ErrSocketInUse", err)
	}
	if _, err := os.Stat(h.srv.SocketPath()); err != nil {
		t.Errorf("the other server's socket was touched: %v", err)
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	h := newHarness(t, nil)
	stale, err := net.Listen("unix", h.srv.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // the file stays, nobody listens: a crashed agent's socket
	h.startAndRegister()
}
