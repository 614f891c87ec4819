package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
)

// Timeouts of the agent's HTTP server. No endpoint streams, so a client
// that is slow to send its request or to read the answer is cut off
// rather than holding a connection (and a goroutine) open.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 30 * time.Second
	httpIdleTimeout       = 60 * time.Second
)

// newHTTPServer returns a server of h with the agent's timeouts.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: httpReadHeaderTimeout, ReadTimeout: httpReadTimeout,
		WriteTimeout: httpWriteTimeout, IdleTimeout: httpIdleTimeout}
}

// serveHTTP sets up the admin endpoint on addr and, when it differs,
// inspectAddr: /metrics, /healthz, /readyz, and /inspect only on
// connections made to a loopback address. /inspect names the node's pods,
// services and VNIs and takes no credentials, so other hosts never reach
// it: with the chart's --metrics-addr on the node's address, it is served
// on --inspect-addr (127.0.0.1) alone. Empty addresses serve nothing; the
// listener is nil when both are. notReady says why the agent must not
// report ready beyond its start, or "".
func serveHTTP(addr, inspectAddr string, reg *prometheus.Registry, ready *atomic.Bool, serving func() bool, report func(context.Context) *inspect.Report, notReady func() string) (*http.Server, net.Listener, error) {
	if inspectAddr != "" && !isLoopback(inspectAddr) {
		return nil, nil, fmt.Errorf("--inspect-addr %q: %w", inspectAddr, errInspectNotLoopback)
	}
	var addrs []string
	if addr != "" {
		addrs = append(addrs, addr)
	}
	if inspectAddr != "" && inspectAddr != addr {
		addrs = append(addrs, inspectAddr)
	}
	var ls []net.Listener
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, nil, fmt.Errorf("listen %s: %w", a, err)
		}
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return nil, nil, nil
	}
	mux := http.NewServeMux()
	// Uncompressed: the agent's metrics are a few KiB, and a scrape asking
	// for gzip would otherwise keep a compressor of about 1.5 MB live in
	// promhttp's pool, a tenth of the agent's anonymous memory.
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, DisableCompression: true}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := notReady(); why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		if !ready.Load() || !serving() {
			http.Error(w, "not ready: reconciling or not serving the kubelet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle(inspect.Path, loopbackOnly(inspect.Handler(report)))
	if len(ls) == 1 {
		return newHTTPServer(mux), ls[0], nil
	}
	return newHTTPServer(mux), newMultiListener(ls), nil
}

// errInspectNotLoopback refuses an /inspect address other hosts reach.
var errInspectNotLoopback = errors.New("/inspect takes no credentials and is served on loopback addresses only (127.0.0.0/8, ::1, localhost)")

// isLoopback reports whether addr (host:port) names a loopback address:
// 127.0.0.0/8, ::1 or localhost. An empty host (every address) is not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackOnly answers 404 to requests that came in on a connection to a
// non-loopback address.
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		tcp, ok := local.(*net.TCPAddr)
		if !ok || !tcp.IP.IsLoopback() {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// multiListener accepts from several listeners as one, so that one
// http.Server serves them all and its Shutdown closes them all. Its
// goroutines, one per listener, end when Close has closed the listeners.
type multiListener struct {
	ls    []net.Listener
	conns chan net.Conn
	errs  chan error
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func newMultiListener(ls []net.Listener) *multiListener {
	m := &multiListener{ls: ls, conns: make(chan net.Conn), errs: make(chan error), done: make(chan struct{})}
	for _, l := range ls {
		m.wg.Go(func() { m.accept(l) })
	}
	return m
}

// accept hands l's connections and errors to Accept until Close. After an
// error other than a closed listener it goes on, paced by the server's
// Accept calls (the server backs off on temporary errors and closes the
// listener on others).
func (m *multiListener) accept(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			select {
			case m.errs <- err:
			case <-m.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case m.conns <- c:
		case <-m.done:
			c.Close()
			return
		}
	}
}

// Accept returns the next connection or error of any listener.
func (m *multiListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case err := <-m.errs:
		return nil, err
	case <-m.done:
		return nil, net.ErrClosed
	}
}

// Close closes every listener and waits for the accepting goroutines.
func (m *multiListener) Close() error {
	var err error
	m.once.Do(func() {
		close(m.done)
		for _, l := range m.ls {
			err = errors.Join(err, l.Close())
		}
		m.wg.Wait()
	})
	return err
}

// Addr is the first listener's address (the metrics address).
func (m *multiListener) Addr() net.Addr { return m.ls[0].Addr() }
