package grpcapi

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// acceptAll accepts from l until it is closed, handing each connection on;
// it returns the channel and a stop that closes l and waits for the loop.
func acceptAll(t *testing.T, l net.Listener) (<-chan net.Conn, func()) {
	t.Helper()
	ch := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	return ch, func() { l.Close(); <-done }
}

// dialFrom connects to addr from the loopback address from (all of
// 127.0.0.0/8 is the loopback on Linux), so that one test has two hosts.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// accepted fails unless the listener hands on a connection.
func accepted(t *testing.T, ch <-chan net.Conn, what string) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not accepted", what)
		return nil
	}
}

// closedByServer fails unless the server closes c (a read ends, not by timeout).
func closedByServer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: read %v, want the connection closed by the server", what, err)
	}
}

// Issue 24, item 1: the gRPC port is open to every pod, and nothing bound
// the connections one pod could open. One host is held to its share, all
// of them to the total, and a closed connection gives its slot back.
func TestIssue24Item1OneHostCannotTakeEveryConnection(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := NewLimiter(Limits{MaxConnections: 3, MaxConnectionsPerHost: 2}, nil)
	ch, stop := acceptAll(t, lim.Listener(inner))
	defer stop()
	addr := inner.Addr().String()

	dialFrom(t, "127.0.0.1", addr)
	a1 := accepted(t, ch, "host A, first")
	dialFrom(t, "127.0.0.1", addr)
	accepted(t, ch, "host A, second")
	closedByServer(t, dialFrom(t, "127.0.0.1", addr), "host A, third (per host)")

	dialFrom(t, "127.0.0.2", addr)
	accepted(t, ch, "host B, first")
	closedByServer(t, dialFrom(t, "127.0.0.2", addr), "host B, second (total)")

	a1.Close() // the server's side: its slot is given back
	dialFrom(t, "127.0.0.1", addr)
	accepted(t, ch, "host A again, after one of its connections closed")
}

// Issue 24, item 1: calls beyond one connection's rate are answered
// Unavailable before they cost a token review; another connection is not
// held back, and a closed connection's limiter is dropped.
func TestIssue24Item1CallRatePerConnection(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A rate so low that no token comes back during the test.
	lim := NewLimiter(Limits{CallsPerSecond: 1e-6, CallBurst: 3, MaxStreams: 4}, nil)
	opts := append(lim.ServerOptions(), grpc.ChainUnaryInterceptor(lim.UnaryInterceptor()))
	g := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- g.Serve(lim.Listener(inner)) }()
	defer func() {
		g.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	dial := func() (*grpc.ClientConn, healthpb.HealthClient) {
		conn, err := grpc.NewClient(inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn, healthpb.NewHealthClient(conn)
	}
	call := func(c healthpb.HealthClient) error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	connA, a := dial()
	for i := range 3 {
		if err := call(a); err != nil {
			t.Fatalf("call %d within the burst: %v", i, err)
		}
	}
	if err := call(a); status.Code(err) != codes.Unavailable {
		t.Fatalf("call beyond the burst: %v, want Unavailable", err)
	}
	_, b := dial()
	if err := call(b); err != nil {
		t.Fatalf("another connection: %v", err)
	}
	connA.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lim.mu.Lock()
		n := len(lim.calls)
		lim.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections' limiters kept, want 1 after one closed", n)
		}
		time.Sleep(time.Millisecond) // a bounded poll on state, not a synchronization by time
	}
}

// A connection has at most MaxStreams calls open: one more waits (the
// client queues it) until one ends.
func TestIssue24Item1StreamsPerConnectionBounded(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := NewLimiter(Limits{MaxStreams: 1}, nil)
	g := grpc.NewServer(lim.ServerOptions()...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- g.Serve(lim.Listener(inner)) }()
	defer func() {
		g.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	conn, err := grpc.NewClient(inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)

	// Watch stays open until its context ends: it holds the one stream.
	wctx, stopWatch := context.WithCancel(t.Context())
	defer stopWatch()
	w, err := c.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("watch: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err = c.Check(ctx, &healthpb.HealthCheckRequest{})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a second call while one is open: %v, want it held until its deadline", err)
	}
	stopWatch()
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call after the first ended: %v", err)
	}
}
