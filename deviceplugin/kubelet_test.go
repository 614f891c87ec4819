package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// waitTimeout bounds every wait of the tests; nothing here should take
// close to it, it only turns a hang into a failure.
const waitTimeout = 10 * time.Second

// recv returns the next value from ch, failing the test after waitTimeout.
func recv[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		tb.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		var zero T
		return zero
	}
}

// registration is one Register call the fake kubelet accepted.
type registration struct {
	req *pluginapi.RegisterRequest
	at  time.Time
}

// fakeKubelet plays the kubelet's side of the device-plugin API the way
// kubelet 1.37 does (pkg/kubelet/cm/devicemanager/plugin/v1beta1): a
// Registration server on kubelet.sock; on Register it dials the plugin's
// socket, calls GetDevicePluginOptions and opens ListAndWatch; on start it
// removes every socket in the directory.
//
// A second Register for an endpoint that is still connected is refused
// ("device plugin already connected"), and, as in the kubelet, only after
// the dial and the GetDevicePluginOptions call (the check is in the device
// manager's PluginConnected). The kubelet (1.37.1) then also drops its
// first client from its list (deregisterClient matches the socket path),
// so the end of the first connection is never reported and every later
// Register for that socket is refused until the kubelet restarts. The fake
// does not play that part; instead every refusal fails the test.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer

	dir  string
	path string
	ctx  context.Context // the test's; ends every stream when the test ends

	registered chan registration
	lists      chan []*pluginapi.Device

	mu        sync.Mutex
	srv       *grpc.Server
	ln        *net.UnixListener
	serveDone chan struct{}
	listenAt  time.Time
	endpoints map[string]*endpoint
	refused   int // Registers refused as already connected
	// beforeReply, when set, is called once, by the next Register that
	// connects the plugin, just before it replies.
	beforeReply func(endpoint string)
	wg          sync.WaitGroup
}

// endpoint is the fake kubelet's connection to one plugin socket.
type endpoint struct {
	conn   *grpc.ClientConn
	client pluginapi.DevicePluginClient
	opts   *pluginapi.DevicePluginOptions
	cancel context.CancelFunc
}

func newFakeKubelet(t testing.TB, dir string) *fakeKubelet {
	k := &fakeKubelet{
		dir:        dir,
		path:       filepath.Join(dir, DefaultKubeletSocketName),
		ctx:        t.Context(),
		registered: make(chan registration, 64),
		lists:      make(chan []*pluginapi.Device, 256),
		endpoints:  make(map[string]*endpoint),
	}
	t.Cleanup(func() {
		k.stop()
		if n := k.refusedCount(); n != 0 {
			t.Errorf("kubelet refused %d registrations as already connected (a real kubelet would be stuck until it restarts)", n)
		}
	})
	return k
}

// start removes the sockets in the directory, as the kubelet does when it
// starts, when clean is set, and then serves kubelet.sock.
func (k *fakeKubelet) start(t testing.TB, clean bool) {
	t.Helper()
	if clean {
		entries, err := os.ReadDir(k.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Type()&fs.ModeSocket != 0 {
				if err := os.Remove(filepath.Join(k.dir, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.listenAt = time.Now()
	ln, err := net.Listen("unix", k.path)
	if err != nil {
		t.Fatal(err)
	}
	// Stop waits for the Register handlers, so that none adds an
	// endpoint after stop has dropped them.
	k.ln = ln.(*net.UnixListener)
	k.srv = grpc.NewServer(grpc.WaitForHandlers(true))
	pluginapi.RegisterRegistrationServer(k.srv, k)
	k.serveDone = make(chan struct{})
	srv, done := k.srv, k.serveDone
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
}

// stop shuts the kubelet down: kubelet.sock disappears, then every plugin
// connection closes. The registration server stops first and stop waits
// for the Register calls in flight, so that a plugin that registers again
// as soon as its stream ends cannot leave an endpoint behind.
func (k *fakeKubelet) stop() {
	k.mu.Lock()
	srv, done := k.srv, k.serveDone
	k.srv = nil
	k.mu.Unlock()
	if srv != nil {
		srv.Stop()
		<-done
	}
	k.mu.Lock()
	eps := k.endpoints
	k.endpoints = make(map[string]*endpoint)
	k.mu.Unlock()
	for _, ep := range eps {
		ep.cancel()
		ep.conn.Close()
	}
	k.wg.Wait()
}

// crash ends the kubelet as a kill does: like stop, except that
// kubelet.sock stays on disk, refusing connections, until the next
// kubelet's start removes it.
func (k *fakeKubelet) crash() {
	k.mu.Lock()
	if k.ln != nil {
		k.ln.SetUnlinkOnClose(false)
	}
	k.mu.Unlock()
	k.stop()
}

// restart stops the kubelet and starts it again, cleaning the directory.
func (k *fakeKubelet) restart(t testing.TB) {
	t.Helper()
	k.stop()
	k.start(t, true)
}

// endStream drops the plugin's endpoint and ends its ListAndWatch stream
// without a restart, as the kubelet does after a transport error.
func (k *fakeKubelet) endStream(endpointName string) bool {
	k.mu.Lock()
	ep, ok := k.endpoints[endpointName]
	delete(k.endpoints, endpointName)
	k.mu.Unlock()
	if ok {
		ep.cancel()
		ep.conn.Close()
	}
	return ok
}

// client returns the plugin client of the endpoint, or nil.
func (k *fakeKubelet) client(endpointName string) pluginapi.DevicePluginClient {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ep, ok := k.endpoints[endpointName]; ok {
		return ep.client
	}
	return nil
}

// onNextReply sets the beforeReply hook.
func (k *fakeKubelet) onNextReply(f func(endpoint string)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.beforeReply = f
}

func (k *fakeKubelet) refusedCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.refused
}

func (k *fakeKubelet) lastListenAt() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.listenAt
}

// Register implements the kubelet's Registration service.
func (k *fakeKubelet) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	at := time.Now()
	if req.GetVersion() != pluginapi.Version {
		return nil, fmt.Errorf("unsupported version %q", req.GetVersion())
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, req.GetEndpoint()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	client := pluginapi.NewDevicePluginClient(conn)
	dialCtx, cancelDial := context.WithTimeout(ctx, waitTimeout)
	defer cancelDial()
	opts, err := client.GetDevicePluginOptions(dialCtx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("get device plugin options: %w", err)
	}
	streamCtx, cancel := context.WithCancel(k.ctx)
	ep := &endpoint{conn: conn, client: client, opts: opts, cancel: cancel}
	k.mu.Lock()
	_, connected := k.endpoints[req.GetEndpoint()]
	if connected {
		k.refused++
	} else {
		k.endpoints[req.GetEndpoint()] = ep
	}
	k.mu.Unlock()
	if connected {
		cancel()
		conn.Close()
		return nil, fmt.Errorf("device plugin already connected: %s", req.GetEndpoint())
	}
	stream, err := client.ListAndWatch(streamCtx, &pluginapi.Empty{})
	if err != nil {
		k.mu.Lock()
		if k.endpoints[req.GetEndpoint()] == ep {
			delete(k.endpoints, req.GetEndpoint())
		}
		k.mu.Unlock()
		cancel()
		conn.Close()
		return nil, fmt.Errorf("list and watch: %w", err)
	}
	k.wg.Go(func() { k.watch(req.GetEndpoint(), ep, stream) })
	k.mu.Lock()
	hook := k.beforeReply
	k.beforeReply = nil
	k.mu.Unlock()
	if hook != nil {
		hook(req.GetEndpoint())
	}
	k.registered <- registration{req: req, at: at}
	return &pluginapi.Empty{}, nil
}

// watch forwards the plugin's device lists until the stream ends, then
// forgets the endpoint (the kubelet's PluginDisconnected).
func (k *fakeKubelet) watch(name string, ep *endpoint, stream pluginapi.DevicePlugin_ListAndWatchClient) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			k.mu.Lock()
			if k.endpoints[name] == ep {
				delete(k.endpoints, name)
			}
			k.mu.Unlock()
			ep.cancel()
			ep.conn.Close()
			return
		}
		select {
		case k.lists <- resp.GetDevices():
		case <-k.ctx.Done():
			return
		}
	}
}

// fakeResource records what the server hands it.
type fakeResource struct {
	name        string
	allocErr    error
	preStartErr error
	allocs      chan []string
	preStarts   chan []string
}

func newFakeResource(name string) *fakeResource {
	return &fakeResource{name: name, allocs: make(chan []string, 64), preStarts: make(chan []string, 64)}
}

func (f *fakeResource) Name() string { return f.name }

func (f *fakeResource) Allocate(_ context.Context, req *pluginapi.ContainerAllocateRequest) (*pluginapi.ContainerAllocateResponse, error) {
	ids := req.GetDevicesIds()
	select {
	case f.allocs <- ids:
	default:
	}
	if f.allocErr != nil {
		return nil, f.allocErr
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"FAKE_DEVICES": fmt.Sprint(ids)}}
	for _, id := range ids {
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + id, HostPath: "/dev/" + id, Permissions: "rw"})
	}
	return resp, nil
}

func (f *fakeResource) PreStartContainer(_ context.Context, ids []string) error {
	select {
	case f.preStarts <- ids:
	default:
	}
	return f.preStartErr
}

// errTest is what fake resources fail with.
var errTest = errors.New("test failure")
