package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// generation is one gRPC server on one incarnation of the socket. The
// server starts a new generation whenever its socket has to be served
// again; an older one keeps serving the connections the kubelet made to
// it until the kubelet closes them.
type generation struct {
	grpc     *grpc.Server
	svc      *pluginService
	conns    *connCounter
	socketID fileID
	done     chan struct{} // closed when Serve has returned
	serveErr error         // Serve's error, readable after done
}

// connCounter is a gRPC stats handler that counts a generation's open
// connections and pokes closed, without blocking, when the last one ends.
type connCounter struct {
	open   atomic.Int64
	closed chan<- struct{}
}

func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c *connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (c *connCounter) HandleConn(_ context.Context, st stats.ConnStats) {
	switch st.(type) {
	case *stats.ConnBegin:
		c.open.Add(1)
	case *stats.ConnEnd:
		if c.open.Add(-1) == 0 {
			select {
			case c.closed <- struct{}{}:
			default:
			}
		}
	}
}

// startServing listens on the socket (replacing a stale one) and serves
// the device-plugin API on it in a new goroutine that the generation's
// stop waits for. A value on connsClosed tells that the last connection
// of some generation has ended.
func (s *Server) startServing(id int, connsClosed chan<- struct{}) (*generation, error) {
	if err := removeStaleSocket(s.socketPath); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", s.socketPath)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	// The server removes its socket itself, and only while it is still
	// the one it created: closing a listener must never unlink a newer
	// socket at the same path.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	sid, err := statID(s.socketPath)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("stat own socket: %w", err)
	}
	conns := &connCounter{closed: connsClosed}
	g := &generation{
		grpc:     grpc.NewServer(grpc.WaitForHandlers(true), grpc.StatsHandler(conns)),
		svc:      &pluginService{s: s, gen: id},
		conns:    conns,
		socketID: sid,
		done:     make(chan struct{}),
	}
	pluginapi.RegisterDevicePluginServer(g.grpc, g.svc)
	go func() {
		defer close(g.done)
		g.serveErr = g.grpc.Serve(ln)
	}()
	return g, nil
}

// stop ends every RPC, waits for the handlers and the Serve goroutine,
// and removes the socket if it is still this generation's. Streams that
// end meanwhile count as ended by the kubelet unless cut is set: the run
// loop stops a generation that has connections only when Run returns, and
// otherwise only once the kubelet has closed them, when the handlers of
// its streams may not have returned yet.
func (g *generation) stop(path string, cut bool) error {
	if cut {
		g.svc.stopping.Store(true)
	}
	g.grpc.Stop()
	<-g.done
	return removeIfSame(path, g.socketID)
}

// pluginService implements the kubelet's DevicePlugin service for one
// generation.
type pluginService struct {
	pluginapi.UnimplementedDevicePluginServer

	s        *Server
	gen      int
	stopping atomic.Bool // set before the server ends the streams itself
}

// GetDevicePluginOptions returns the options the server registered with.
// The kubelet calls it once per connection, which starts a new epoch.
func (p *pluginService) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	p.s.kubeletConnected(p.gen)
	return pluginOptions(), nil
}

// ListAndWatch sends the full device list at once and again after every
// Update, until the kubelet or the server ends the stream.
func (p *pluginService) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	s := p.s
	opened := time.Now()
	epoch := s.streamOpened()
	s.log.Info("kubelet opened ListAndWatch")
	defer func() {
		s.streamClosed(epoch, time.Since(opened), !p.stopping.Load())
	}()

	var sent uint64
	first := true
	for {
		set, changed := s.snapshot()
		if first || set.version != sent {
			if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: set.pluginDevices()}); err != nil {
				return fmt.Errorf("send device list: %w", err)
			}
			first, sent = false, set.version
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation answers each container with the Resource's
// PreferredAllocator when it has one and its answer is valid, and with
// PreferredAllocation otherwise. An empty answer lets the kubelet choose.
func (p *pluginService) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	set := p.s.currentDevices()
	creqs := req.GetContainerRequests()
	resp := &pluginapi.PreferredAllocationResponse{
		ContainerResponses: make([]*pluginapi.ContainerPreferredAllocationResponse, 0, len(creqs)),
	}
	for _, creq := range creqs {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{
			DeviceIDs: p.s.preferred(ctx, set, creq),
		})
	}
	return resp, nil
}

func (s *Server) preferred(ctx context.Context, set *deviceSet, creq *pluginapi.ContainerPreferredAllocationRequest) []string {
	must := creq.GetMustIncludeDeviceIDs()
	size := int(creq.GetAllocationSize())
	// The kubelet's view may lag an Update: never prefer a device that is
	// gone or unhealthy now, unless it is already allocated (must-include).
	avail := make([]string, 0, len(creq.GetAvailableDeviceIDs()))
	for _, id := range creq.GetAvailableDeviceIDs() {
		if d, ok := set.byID[id]; (ok && d.Healthy) || slices.Contains(must, id) {
			avail = append(avail, id)
		}
	}
	if pa, ok := s.res.(PreferredAllocator); ok {
		ids, err := pa.PreferredAllocation(ctx, avail, must, size)
		if err == nil {
			err = validPreferred(ids, avail, must, size)
		}
		if err == nil {
			return ids
		}
		s.log.Warn("resource's preferred allocation rejected; using the NUMA policy", "err", err)
	}
	return PreferredAllocation(avail, must, size, set.topo)
}

// validPreferred returns an error unless ids is a valid answer: size
// distinct IDs from available, including all of mustInclude.
func validPreferred(ids, available, mustInclude []string, size int) error {
	if len(ids) != size {
		return fmt.Errorf("%d devices, want %d", len(ids), size)
	}
	for i, id := range ids {
		if !slices.Contains(available, id) {
			return fmt.Errorf("device %q not available", id)
		}
		if slices.Contains(ids[:i], id) {
			return fmt.Errorf("device %q twice", id)
		}
	}
	for _, id := range mustInclude {
		if slices.Contains(available, id) && !slices.Contains(ids, id) {
			return fmt.Errorf("must-include device %q missing", id)
		}
	}
	return nil
}

// Allocate checks that every requested device is advertised and healthy
// and hands each container request to the Resource.
func (p *pluginService) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	s := p.s
	start := time.Now()
	defer func() { s.allocateSeconds.Observe(time.Since(start).Seconds()) }()

	set := s.currentDevices()
	creqs := req.GetContainerRequests()
	resp := &pluginapi.AllocateResponse{
		ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(creqs)),
	}
	for i, creq := range creqs {
		cresp, err := s.allocateContainer(ctx, set, creq)
		if err != nil {
			s.allocateFailed.Inc()
			s.log.Warn("allocate failed", "container", i, "devices", creq.GetDevicesIds(), "err", err)
			return nil, grpcError(fmt.Errorf("container %d: %w", i, err))
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	s.allocatedOK.Add(float64(len(creqs)))
	return resp, nil
}

func (s *Server) allocateContainer(ctx context.Context, set *deviceSet, creq *pluginapi.ContainerAllocateRequest) (*pluginapi.ContainerAllocateResponse, error) {
	if err := set.check(creq.GetDevicesIds(), true); err != nil {
		return nil, err
	}
	cresp, err := s.res.Allocate(ctx, creq)
	if err != nil {
		return nil, err
	}
	if cresp == nil {
		return nil, errors.New("resource returned no response")
	}
	return cresp, nil
}

// PreStartContainer checks that every device is advertised and hands the
// call to the Resource.
func (p *pluginService) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	s := p.s
	start := time.Now()
	defer func() { s.preStartSeconds.Observe(time.Since(start).Seconds()) }()

	ids := req.GetDevicesIds()
	// Health is not checked: a restarting container keeps its devices.
	if err := s.currentDevices().check(ids, false); err != nil {
		s.log.Warn("prestart refused", "devices", ids, "err", err)
		return nil, grpcError(err)
	}
	if err := s.res.PreStartContainer(ctx, ids); err != nil {
		s.log.Error("prestart failed", "devices", ids, "err", err)
		return nil, grpcError(fmt.Errorf("prestart: %w", err))
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

// grpcError gives err the gRPC code the kubelet should see, keeping a
// status a Resource chose itself.
func grpcError(err error) error {
	var code codes.Code
	switch {
	case errors.Is(err, ErrInvalidRequest), errors.Is(err, ErrUnknownDevice):
		code = codes.InvalidArgument
	case errors.Is(err, ErrUnhealthyDevice):
		code = codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	default:
		if st, ok := status.FromError(err); ok {
			return status.Error(st.Code(), err.Error())
		}
		code = codes.Internal
	}
	return status.Error(code, err.Error())
}
