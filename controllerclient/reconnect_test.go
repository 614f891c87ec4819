package controllerclient

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// chanListener is a net.Listener fed by its owner.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *chanListener) Addr() net.Addr { return l.addr }

// flappingController listens on a real TCP address. While down, it
// accepts and closes every connection at once (a controller that is
// restarting, as the agent sees it), reporting each attempt; once up, it
// hands them to a gRPC server.
type flappingController struct {
	lis      net.Listener
	up       atomic.Bool
	attempts chan struct{}
	serving  *chanListener
}

func newFlappingController(t *testing.T) *flappingController {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &flappingController{lis: lis, attempts: make(chan struct{}, 1024),
		serving: &chanListener{addr: lis.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}}
	g := grpc.NewServer()
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(f.serving) })
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			if !f.up.Load() {
				c.Close()
				select {
				case f.attempts <- struct{}{}:
				default:
				}
				continue
			}
			select {
			case f.serving.conns <- c:
			case <-f.serving.done:
				c.Close()
			}
		}
	})
	t.Cleanup(func() {
		lis.Close()
		g.Stop()
		wg.Wait()
	})
	return f
}

// Issue 24, item 2: gRPC's default reconnect backoff grows to 120 s, so
// the agent reached a restarted controller long after it was serving
// again (32 s after a 150 s outage). After an outage long enough to grow
// the backoff past the cap, the client is connected again within the cap
// (and its jitter) of the controller serving. Under the default backoff
// this outage (6 failed attempts, ~16 s) leaves the next attempt at least
// ~8 s away.
func TestIssue24Item2ReconnectsSlowlyAfterOutage(t *testing.T) {
	f := newFlappingController(t)
	c, err := Dial(f.lis.Addr().String(), Options{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.conn.Connect()

	const failures = 6
	outage := time.NewTimer(60 * time.Second)
	defer outage.Stop()
	for i := range failures {
		select {
		case <-f.attempts:
		case <-outage.C:
			t.Fatalf("only %d connection attempts during the outage, want %d", i, failures)
		}
	}
	f.up.Store(true)
	up := time.Now()

	limit := time.Duration(float64(reconnect.Backoff.MaxDelay)*(1+reconnect.Backoff.Jitter)) + time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for s := c.conn.GetState(); s != connectivity.Ready; s = c.conn.GetState() {
		if s == connectivity.Idle {
			c.conn.Connect()
		}
		if !c.conn.WaitForStateChange(ctx, s) {
			t.Fatalf("not connected %s after the controller came back (state %s)", time.Since(up), s)
		}
	}
	took := time.Since(up)
	if took > limit {
		t.Fatalf("connected %s after the controller came back, want within %s", took, limit)
	}
	t.Logf("connected %s after the controller came back (cap %s)", took, reconnect.Backoff.MaxDelay)
}

// The cap itself, in case the test above ran with a short outage.
func TestReconnectBackoffCapped(t *testing.T) {
	b := reconnect.Backoff
	if b.MaxDelay <= 0 || b.MaxDelay > 5*time.Second || b.Jitter <= 0 || b.BaseDelay <= 0 || b.BaseDelay > b.MaxDelay || b.Multiplier < 1 {
		t.Fatalf("reconnect backoff %+v: want a cap of at most 5 s, jitter, a base below the cap", b)
	}
	if m := reconnect.MinConnectTimeout; m < time.Second || m > 20*time.Second {
		t.Fatalf("MinConnectTimeout %s: want 1-20 s", m)
	}
}
