package claimstatus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"k8s.io/client-go/util/workqueue"
)

// Status is what a VNIClaim's status says: its VNI (0: none), or why it
// has none.
type Status struct {
	VNI     uint16
	Message string
}

// ErrNotFound is wrapped by a Client when the claim does not exist.
var ErrNotFound = errors.New("vniclaim not found")

// Client reads and writes VNIClaims' status; KubeClient is the real one.
type Client interface {
	// Get returns what the claim's status says.
	Get(ctx context.Context, c controller.ClaimRef) (Status, error)
	// Patch makes the claim's status say st.
	Patch(ctx context.Context, c controller.ClaimRef, st Status) error
}

// Source is where a claim's lease is read, the controller's Allocator.
type Source interface {
	// ClaimVNI returns the VNI of the claim's committed lease, or an
	// error wrapping controller.ErrUnavailable while it cannot tell.
	ClaimVNI(c controller.ClaimRef) (vni uint16, leased bool, err error)
}

// Options tune a Writer; zero fields take the defaults.
type Options struct {
	// Workers write in parallel, each claim by one at a time; default 4.
	// The client's rate limit (--api-qps) bounds them together.
	Workers int
	// Retry bounds the attempts to bring one claim's status up to date
	// and spaces them; default 8 attempts from 500 ms to 30 s.
	Retry backoff.Policy
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer for the metric; nil registers none.
	Registerer prometheus.Registerer
}

// DefaultRetry spans about two minutes: an API server restart.
var DefaultRetry = backoff.Policy{Initial: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2, Attempts: 8}

// Writer keeps VNIClaims' status in step with their leases. Its methods
// are safe for concurrent use; Run writes, once, until its context ends.
type Writer struct {
	client Client
	opts   Options
	log    *slog.Logger
	calls  *prometheus.CounterVec
	gaveUp prometheus.Counter
	queue  workqueue.TypedDelayingInterface[controller.ClaimRef]

	mu sync.Mutex
	// known is what each claim's status says, as last read or written;
	// a claim missing here is read before it is written.
	known map[controller.ClaimRef]Status
	// failed is why each claim could not get a VNI, until it gets one.
	failed map[controller.ClaimRef]string
	// attempts counts each claim's failed attempts in a row.
	attempts map[controller.ClaimRef]int
}

var _ controller.ClaimObserver = (*Writer)(nil)

// New returns a Writer over client.
func New(client Client, opts Options) *Writer {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.Retry.IsZero() {
		opts.Retry = DefaultRetry
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Writer{client: client, opts: opts, log: opts.Logger,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_controller_claim_status_calls_total",
			Help: "Reads (get) and writes (patch) of VNIClaims' status by result: ok, error (retried with backoff), not_found (the claim is gone).",
		}, []string{"call", "result"}),
		gaveUp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slingshot_controller_claim_status_gave_up_total",
			Help: "VNIClaims whose status was not brought up to date within the attempts allowed; the claim's next acquire, or the next load, tries again.",
		}),
		queue:    workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[controller.ClaimRef]{}),
		known:    map[controller.ClaimRef]Status{},
		failed:   map[controller.ClaimRef]string{},
		attempts: map[controller.ClaimRef]int{},
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(w.calls, w.gaveUp)
	}
	return w
}

// Leased implements controller.ClaimObserver: a map look-up when the
// status already shows vni.
func (w *Writer) Leased(c controller.ClaimRef, vni uint16) {
	w.mu.Lock()
	delete(w.failed, c)
	st, ok := w.known[c]
	retrying := w.attempts[c] > 0
	w.mu.Unlock()
	// A claim waiting for its retry is not tried sooner: every node of
	// a job acquires, and that must not defeat the backoff.
	if (!ok || st != (Status{VNI: vni})) && !retrying {
		w.queue.Add(c)
	}
}

// Failed implements controller.ClaimObserver.
func (w *Writer) Failed(c controller.ClaimRef, message string) {
	w.mu.Lock()
	w.failed[c] = message
	st, ok := w.known[c]
	retrying := w.attempts[c] > 0
	w.mu.Unlock()
	if (!ok || st != (Status{Message: message})) && !retrying {
		w.queue.Add(c)
	}
}

// Forget implements controller.ClaimObserver; it is called with the
// Allocator's lock held and takes only the Writer's.
func (w *Writer) Forget(c controller.ClaimRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.known, c)
	delete(w.failed, c)
	delete(w.attempts, c)
}

// Loaded implements controller.ClaimObserver, called with the
// Allocator's lock held (it takes only the Writer's): what the claims' status
// says is read anew (another replica may have written it, or nobody), and
// each claim holding a lease is brought up to date.
func (w *Writer) Loaded(claims []controller.ClaimRef) {
	w.mu.Lock()
	clear(w.known)
	clear(w.attempts)
	w.mu.Unlock()
	for _, c := range claims {
		w.queue.Add(c)
	}
}

// Run writes until ctx ends, reading leases from src; it returns nil
// then. It may be called once.
func (w *Writer) Run(ctx context.Context, src Source) error {
	var wg sync.WaitGroup
	for range w.opts.Workers {
		wg.Go(func() {
			for {
				c, shutdown := w.queue.Get()
				if shutdown {
					return
				}
				w.process(ctx, src, c)
				w.queue.Done(c)
			}
		})
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	return nil
}

// process brings c's status up to date, or schedules the next attempt.
func (w *Writer) process(ctx context.Context, src Source, c controller.ClaimRef) {
	err := w.sync(ctx, src, c)
	if err == nil || ctx.Err() != nil {
		w.mu.Lock()
		delete(w.attempts, c)
		w.mu.Unlock()
		return
	}
	w.mu.Lock()
	w.attempts[c]++
	n := w.attempts[c]
	if n >= w.opts.Retry.Attempts {
		delete(w.attempts, c)
	}
	w.mu.Unlock()
	if n >= w.opts.Retry.Attempts {
		w.gaveUp.Inc()
		w.log.Warn("vniclaim status not written; giving up until the claim's next acquire or the next load",
			"claim", c.Namespace+"/"+c.Name, "attempts", n, "err", err)
		return
	}
	w.log.Debug("vniclaim status not written; retrying", "claim", c.Namespace+"/"+c.Name, "attempt", n, "err", err)
	w.queue.AddAfter(c, w.opts.Retry.Delay(n))
}

// sync reads c's lease and writes c's status where it says otherwise.
// It returns nil when there is nothing (more) to do, an error to retry.
func (w *Writer) sync(ctx context.Context, src Source, c controller.ClaimRef) error {
	vni, leased, err := src.ClaimVNI(c)
	if err != nil {
		// Not loaded (a standby, a reload), or the lease's commit is
		// under way: the load's Loaded, or the acquire once committed,
		// sends c again.
		return nil
	}
	w.mu.Lock()
	want := Status{VNI: vni}
	if !leased {
		want = Status{Message: w.failed[c]}
	}
	have, ok := w.known[c]
	w.mu.Unlock()
	if !ok {
		if have, err = w.client.Get(ctx, c); err != nil {
			return w.failure(c, "get", err)
		}
		w.calls.WithLabelValues("get", "ok").Inc()
		w.remember(c, have)
	}
	if have == want {
		return nil
	}
	if err := w.client.Patch(ctx, c, want); err != nil {
		return w.failure(c, "patch", err)
	}
	w.calls.WithLabelValues("patch", "ok").Inc()
	w.remember(c, want)
	w.log.Info("vniclaim status written", "claim", c.Namespace+"/"+c.Name, "vni", want.VNI, "message", want.Message)
	return nil
}

// remember records what c's status says. What was just read or written
// is kept even where a load cleared the map meanwhile: only this, the
// leading replica, writes it.
func (w *Writer) remember(c controller.ClaimRef, st Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.known[c] = st
}

// failure counts a failed call and returns the error to retry, or nil
// for a claim that does not exist (nothing to write; forgotten).
func (w *Writer) failure(c controller.ClaimRef, call string, err error) error {
	if errors.Is(err, ErrNotFound) {
		w.calls.WithLabelValues(call, "not_found").Inc()
		w.Forget(c)
		return nil
	}
	w.calls.WithLabelValues(call, "error").Inc()
	return fmt.Errorf("%s status of vniclaim %s/%s: %w", call, c.Namespace, c.Name, err)
}
