package deviceplugin

import (
	"context"
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
		if epoch, epochGen := s.currentEpoch(); epoch != before {
			res.gen = epochGen
		}
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
// kubelet socket it was made on. The identity is read before dialling, so
// a kubelet that replaces its socket meanwhile is registered with again.
func (s *Server) registerOnce(ctx context.Context) (fileID, error) {
	id, err := statID(s.kubeletPath)
	if err != nil {
		return fileID{}, fmt.Errorf("kubelet socket: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.registerTimeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+s.kubeletPath,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return s.dial(ctx, s.kubeletPath)
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

// dialUnix connects to the unix socket at path.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}
