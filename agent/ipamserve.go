package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
)

// IPAMStateName is the allocator's state file in the state directory.
const IPAMStateName = "ipam.json"

// buildIPAM makes the node's address allocator over the controller's IP
// slices, hands it to the heartbeat (and the device-plugin front end, made after it), and listens on the
// slingshot-ipam plugin's socket.
func (a *parts) buildIPAM(context.Context) error {
	alloc, err := ipam.New(ipam.Options{
		StatePath:  filepath.Join(a.opts.StateDir, IPAMStateName),
		Slicer:     ipSlicer{a.client.Client},
		Logger:     a.logger.With("component", "ipam"),
		Registerer: a.reg,
		Refused: func(pod ipamwire.Pod, err error) {
			if pod.Name != "" {
				a.events.Record(event.Pod(pod.Namespace, pod.Name, pod.UID), event.AddressRefused,
					fmt.Sprintf("The slingshot-ipam CNI plugin's request for an address was refused: %v", err))
			}
		},
	})
	if err != nil {
		return fmt.Errorf("ip address allocator (its state file records addresses in use: check it before moving it aside): %w", err)
	}
	a.ipam = alloc
	a.client.SetSliceHolder(sliceHolder{a: alloc, events: a.events, node: a.opts.NodeName})
	if a.opts.IPAMSocket == "" {
		return nil
	}
	lis, err := listenUnix(a.opts.IPAMSocket)
	if err != nil {
		return fmt.Errorf("--ipam-socket: %w", err)
	}
	a.ipamLis = lis
	a.closers = append(a.closers, lis)
	a.ipamSrv = newHTTPServer(alloc.Handler())
	return nil
}

// listenUnix listens on a unix socket at path, replacing the socket a
// previous agent left, but never another kind of file. Only root may
// connect: the CNI plugin runs as the runtime, root.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	switch fi, err := os.Lstat(path); {
	case err == nil && fi.Mode().Type() == fs.ModeSocket:
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	case err == nil:
		return nil, fmt.Errorf("%s exists and is not a socket", path)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = lis.Close()
		return nil, err
	}
	return lis, nil
}

// runIPAM keeps the allocator's pools warm and serves the plugin's socket
// until ctx ends. The socket's server failing ends it at once with the
// error, which stops the agent: pods waiting for an address must not meet
// a ready agent that no longer answers them.
func (a *parts) runIPAM(ctx context.Context) error {
	if a.ipamSrv == nil {
		return a.ipam.Run(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	served := make(chan error, 1)
	go func() {
		err := a.ipamSrv.Serve(a.ipamLis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		} else {
			err = fmt.Errorf("ipam socket %s: %w", a.opts.IPAMSocket, err)
			cancel(err)
		}
		served <- err
	}()
	a.logger.Info("serving the slingshot-ipam plugin", "socket", a.opts.IPAMSocket)
	runErr := a.ipam.Run(ctx)
	sctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	shutErr := a.ipamSrv.Shutdown(sctx)
	serveErr := <-served
	if serveErr != nil && errors.Is(runErr, context.Canceled) {
		runErr = nil // stopped by the server's failure, which says why
	}
	return errors.Join(runErr, shutErr, serveErr)
}
