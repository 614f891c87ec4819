package deviceplugin

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

const (
	testResource = "example.com/dev"
	testEndpoint = "slingshot-example.com-dev.sock"
)

// testDevices are four devices, two on each of two NUMA nodes.
func testDevices() []Device {
	return []Device{
		{ID: "dev0", Healthy: true, NUMANodes: []int64{0}},
		{ID: "dev1", Healthy: true, NUMANodes: []int64{0}},
		{ID: "dev2", Healthy: true, NUMANodes: []int64{1}},
		{ID: "dev3", Healthy: true, NUMANodes: []int64{1}},
	}
}

// logRecorder is a slog.Handler that passes the server's log lines to the
// test's log when it runs verbose.
type logRecorder struct {
	tb   testing.TB
	mu   sync.Mutex
	done bool
}

func newLogRecorder(tb testing.TB) *logRecorder {
	l := &logRecorder{tb: tb}
	tb.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	l.mu.Lock()
	if !l.done && testing.Verbose() {
		l.tb.Logf("%s %s", r.Level, b.String())
	}
	l.mu.Unlock()
	return nil
}

// waitUntil polls cond until it holds, failing the test after waitTimeout.
// The server shows these states in its Status and metrics but sends no
// notice of them, so the test polls.
func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitTimeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatalf("timed out waiting for %s", what)
		}
	}
}

// registered reports whether the server's status says it is registered.
func (h *harness) registered() bool { return h.srv.Status().Registered }

// shortTempDir returns a new directory removed when the test ends. Its
// path is short: t.TempDir embeds the test name, and unix socket paths
// must stay under 108 bytes.
func shortTempDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			tb.Error(err)
		}
	})
	return dir
}

// harness is one Server under test in a temporary device-plugins
// directory, with a fake kubelet that is not started yet.
type harness struct {
	t       testing.TB
	dir     string
	kubelet *fakeKubelet
	res     *fakeResource
	srv     *Server
	reg     *prometheus.Registry
	logs    *logRecorder

	cancel context.CancelFunc
	runErr chan error
	once   *sync.Once
	err    error
	judged bool
}

// fastBackoff retries quickly and often enough to outlast a kubelet
// restart in a test.
var fastBackoff = backoff.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond, Factor: 2, Attempts: 200}

func newHarness(t testing.TB, configure func(*ServerConfig)) *harness {
	t.Helper()
	h := &harness{
		t:      t,
		dir:    shortTempDir(t),
		res:    newFakeResource(testResource),
		reg:    prometheus.NewPedanticRegistry(),
		logs:   newLogRecorder(t),
		runErr: make(chan error, 1),
	}
	h.kubelet = newFakeKubelet(t, h.dir)
	cfg := ServerConfig{
		Resource:        h.res,
		PluginDir:       h.dir,
		Logger:          slog.New(h.logs),
		Registerer:      h.reg,
		Backoff:         fastBackoff,
		ReregisterDelay: time.Millisecond,
	}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	h.srv = srv
	return h
}

// run starts Server.Run; the test's cleanup stops it. A harness may run
// again after stop.
func (h *harness) run() {
	ctx, cancel := context.WithCancel(h.t.Context())
	h.cancel = cancel
	h.once = new(sync.Once)
	go func() { h.runErr <- h.srv.Run(ctx) }()
	h.t.Cleanup(func() {
		// A test that checked Run's error itself has already judged it.
		if err := h.stop(); err != nil && !h.judged {
			h.t.Errorf("Run: %v", err)
		}
	})
}

// wait returns Run's error once Run returns on its own.
func (h *harness) wait() error {
	h.once.Do(func() { h.err = recv(h.t, h.runErr, "Run to return") })
	h.judged = true
	return h.err
}

// stop cancels Run and returns its error.
func (h *harness) stop() error {
	h.once.Do(func() {
		h.cancel()
		h.err = recv(h.t, h.runErr, "Run to return")
	})
	return h.err
}

// startAndRegister starts the kubelet and the server and waits for the
// first registration.
func (h *harness) startAndRegister() registration {
	h.t.Helper()
	h.kubelet.start(h.t, true)
	h.run()
	reg := recv(h.t, h.kubelet.registered, "first Register")
	waitUntil(h.t, "the server to see its registration succeed", h.registered)
	return reg
}

// checkNoLeaks fails the test if goroutines of this package (outside
// tests), fsnotify or a gRPC server are still running. Closers such as
// fsnotify's Close return a moment before their goroutine has finished
// its deferred calls, so it yields the processor a bounded number of times
// before it judges.
func checkNoLeaks(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		leaks := leakedGoroutines()
		if len(leaks) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Errorf("%d goroutines left:\n%s", len(leaks), strings.Join(leaks, "\n\n"))
			return
		}
		runtime.Gosched()
	}
}

// leakedGoroutines returns the stacks of goroutines still running code of
// this package (outside tests), fsnotify, or a gRPC server.
func leakedGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var leaks []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 {
			continue // the calling goroutine
		}
		for line := range strings.SplitSeq(g, "\n") {
			own := strings.Contains(line, "/deviceplugin/") && strings.Contains(line, ".go:") && !strings.Contains(line, "_test.go:")
			if own || strings.Contains(line, "fsnotify") || strings.Contains(line, "grpc.(*Server)") {
				leaks = append(leaks, g)
				break
			}
		}
	}
	return leaks
}

// contextWithCancel returns a context of the test that the caller may
// cancel early.
func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	return ctx, cancel
}
