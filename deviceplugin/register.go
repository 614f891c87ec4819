package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// pluginOptions are the options the server registers with and reports in
// GetDevicePluginOptions: the kubelet must call PreStartContainer before
// each container start, and may ask for a preferred allocation.
func pluginOptions() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{
		PreStartRequired:                true,
		GetPreferredAllocationAvailable: true,
	}
}

// Retries within freshKubeletWindow of kubelet.sock being created wait at
// most freshKubeletRetry.
const (
	freshKubeletWindow = 2 * time.Second
	freshKubeletRetry  = 10 * time.Millisecond
)

// regResult is the outcome of one registration with its retries.
type regResult struct {
	gen      int    // server generation that registered
	kubelet  fileID // the kubelet socket registered with
	epoch    uint64 // the epoch current when Register returned
	attempts int
	reason   string
	err      error
}

// register calls Register on the kubelet, retrying under the server's
// Backoff. A value on kick ends a wait between attempts early (only when
// the Backoff has no Wait of its own), and waits are short while the
// kubelet's socket is new.
func (s *Server) register(ctx context.Context, gen int, reason string, kick <-chan struct{}) regResult {
	p := s.backoff
	wait := p.Wait
	p.Wait = func(ctx context.Context, d time.Duration) error {
		// A kubelet that has just created its socket listens on it a
		// moment later; until then connecting is refused. Retry soon
		// rather than after a delay meant for a kubelet that is down.
		if created := s.kubeletCreated.Load(); created != 0 && time.Since(time.Unix(0, created)) < freshKubeletWindow {
			d = min(d, freshKubeletRetry)
		}
		if wait != nil {
			return wait(ctx, d)
		}
		return waitOrKick(ctx, d, kick)
	}
	attempts := max(p.Attempts, 1)
	res := regResult{gen: gen}
	n := 0
	res.err = p.Do(ctx, func(ctx context.Context) error {
		n++
		before, _ := s.currentEpoch()
		id, err := s.registerOnce(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.registerFailed.Inc()
				s.log.Info("registering with kubelet failed", "attempt", n, "of", attempts, "err", err)
			}
			return err
		}
		s.registeredOK.Inc()
		res.kubelet = id
		res.attempts, res.reason = n, reason
		// The kubelet dialled the socket path during Register; if the
		// socket was served again meanwhile, the options call tells
		// which generation it reached.
		epoch, epochGen := s.currentEpoch()
		if epoch != before {
			res.gen = epochGen
		}
		res.epoch = epoch
		return nil
	})
	return res
}

// waitOrKick waits d, or less when kick receives or ctx ends; it returns
// ctx's error in the last case.
func waitOrKick(ctx context.Context, d time.Duration, kick <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	case <-kick:
	}
	return nil
}

// registerOnce makes one Register call and returns the identity of the
// kubelet socket it was made on: the socket the connection reached, so
// that a kubelet that replaces its socket before the server connects is
// registered with once, and one that replaces it later is registered with
// again.
func (s *Server) registerOnce(ctx context.Context) (fileID, error) {
	ctx, cancel := context.WithTimeout(ctx, s.registerTimeout)
	defer cancel()
	raw, id, err := s.dialKubelet(ctx)
	if err != nil {
		return fileID{}, err
	}
	// gRPC gets that connection and no other: the Register call reaches
	// the kubelet identified by id, or fails.
	one := make(chan net.Conn, 1)
	one <- raw
	defer func() {
		select {
		case c := <-one:
			c.Close()
		default:
		}
	}()
	conn, err := grpc.NewClient("unix://"+s.kubeletPath,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
			select {
			case c := <-one:
				return c, nil
			default:
				return nil, errKubeletConnUsed
			}
		}))
	if err != nil {
		return fileID{}, fmt.Errorf("dial kubelet: %w", err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     s.socketName,
		ResourceName: s.name,
		Options:      pluginOptions(),
	})
	if err != nil {
		return fileID{}, fmt.Errorf("register: %w", err)
	}
	return id, nil
}

// kubeletDials bounds the connections dialKubelet makes while the kubelet
// keeps replacing its socket.
const kubeletDials = 3

var (
	errKubeletSocketChanging = errors.New("kubelet socket replaced while connecting")
	errKubeletConnUsed       = errors.New("kubelet connection already used")
)

// dialKubelet connects to kubelet.sock and returns the identity of the
// socket file the connection reached. Connecting resolves the path once,
// at a moment between two stats of it: when both name the same file, the
// connection reached that file. When they differ, the kubelet replaced
// its socket meanwhile and the connection, which may have reached either
// kubelet, is made again, up to kubeletDials times.
func (s *Server) dialKubelet(ctx context.Context) (net.Conn, fileID, error) {
	for range kubeletDials {
		before, err := statID(s.kubeletPath)
		if err != nil {
			return nil, fileID{}, fmt.Errorf("kubelet socket: %w", err)
		}
		conn, err := s.dial(ctx, s.kubeletPath)
		if err != nil {
			return nil, fileID{}, fmt.Errorf("dial kubelet: %w", err)
		}
		after, err := statID(s.kubeletPath)
		if err == nil && after == before {
			return conn, before, nil
		}
		conn.Close()
	}
	return nil, fileID{}, fmt.Errorf("dial kubelet: %w", errKubeletSocketChanging)
}

// dialUnix connects to the unix socket at path.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}
