package controllerclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"github.com/slingshot-k8s/slingshot/internal/version"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// PodRef identifies a pod; UID may be empty where unknown.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	// Policy, when set, is the VNI scope of the pod's lease in the grammar
	// of the annotation slingshot.hpe.com/vni ("job", "none", "pod" or
	// "claim:NAME"), as a DRA ResourceClaim's config names it; the
	// controller then uses it instead of the pod's annotation. Empty uses
	// the annotation.
	Policy string `json:"policy,omitempty"`
}

// Scope says whom a VNI belongs to.
type Scope string

// Scopes.
const (
	ScopeNone  Scope = "none"
	ScopeJob   Scope = "job"
	ScopePod   Scope = "pod"
	ScopeClaim Scope = "claim"
)

// Lease is a VNI this node holds for a pod. It is plain data, meant for the
// agent's checkpoint.
type Lease struct {
	// Key names the lease at the controller.
	Key string `json:"key,omitempty"`
	// VNI to program; 0 for ScopeNone.
	VNI   uint16 `json:"vni"`
	Scope Scope  `json:"scope"`
	// Local is set for a pod-scoped VNI from the node's own pool.
	Local bool `json:"local,omitempty"`
	// NetworkRequest is the pod's network request, its annotation
	// slingshot.hpe.com/network as the controller read it from the API
	// server, unparsed; "" when the pod has none (and always in embedded
	// mode, which has no API server).
	NetworkRequest string `json:"networkRequest,omitempty"`
	// Collectives is the job's hardware-collectives reservation, on a
	// job-scoped lease while the controller reserves them; nil otherwise.
	Collectives *Collectives `json:"collectives,omitempty"`
}

// Collectives is a job's hardware-collectives reservation at the fabric
// manager, as the controller passes it on (apiv1.HWCollectives).
type Collectives struct {
	JobID        string `json:"jobID"`
	JobStepID    string `json:"jobStepID"`
	Token        string `json:"token"`
	FabricMgrURL string `json:"fabricMgrURL"`
	AddrsPerJob  uint32 `json:"addrsPerJob"`
	MinNodes     uint32 `json:"minNodes"`
}

// Options configure a Client. Node is required.
type Options struct {
	// Node is this node's name.
	Node string
	// CallTimeout bounds one attempt of one call; default 5 s.
	CallTimeout time.Duration
	// Retry is the retry policy of every call; default 6 attempts from
	// 100 ms to 2 s with jitter.
	Retry backoff.Policy
	// Heartbeat is the interval of slice renewals; default 10 s.
	Heartbeat time.Duration
	// LowWater is the free pod VNIs below which Run refills the pool;
	// default 8.
	LowWater int
	// TLS configures transport security; nil means plaintext (loopback
	// and tests only).
	TLS *tls.Config
	// TokenFile is a projected ServiceAccount token sent as a bearer
	// token, re-read on every call (tokens rotate). It needs TLS unless
	// InsecureToken is set.
	TokenFile     string
	InsecureToken bool
	// InUseVNIs, when set, returns every VNI the node uses (its CXI
	// services' and its recorded leases'); each heartbeat reports them, so
	// that the controller can drop this node's holds on leases it no
	// longer knows of. It must never leave out a VNI the node uses; when
	// it fails, the heartbeat goes without a report.
	InUseVNIs func(ctx context.Context) ([]uint16, error)
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer for slingshot_agent_controller_* metrics; nil registers none.
	Registerer prometheus.Registerer
}

func (o Options) withDefaults() Options {
	if o.CallTimeout <= 0 {
		o.CallTimeout = 5 * time.Second
	}
	if o.Retry.Attempts == 0 {
		o.Retry = backoff.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Factor: 2, Jitter: 0.2, Attempts: 6}
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 10 * time.Second
	}
	if o.LowWater <= 0 {
		o.LowWater = 8
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Client talks to the controller for one node.
type Client struct {
	opts  Options
	api   apiv1.ControllerClient
	conn  *grpc.ClientConn
	pool  *podPool
	kick  chan struct{}
	calls *prometheus.CounterVec
	once  sync.Once

	// beat serialises heartbeats, so that their answers are handed on in
	// order.
	beat sync.Mutex
	// ip guards holder and gen: gen counts the IP slice acquires and
	// releases that have ended, so that a heartbeat's answer that one of
	// them overlapped is not handed to the holder (see deliver).
	ip     sync.Mutex
	holder SliceHolder
	gen    uint64

	// peer is the controller's release as its last answer that said one
	// named it (version.ControllerHeader); nil until then.
	peer atomic.Pointer[string]
}

var errNoNode = errors.New("options: node name required")

// New returns a client that calls the controller through api: a gRPC
// client (Dial makes one), or an in-process controller's (see package
// controller/embedded). The caller owns api and whatever serves it. Of
// opts, TLS and the token are Dial's; New ignores them.
func New(api apiv1.ControllerClient, opts Options) (*Client, error) {
	if opts.Node == "" {
		return nil, errNoNode
	}
	opts = opts.withDefaults()
	c := &Client{opts: opts, api: api, pool: newPodPool(), kick: make(chan struct{}, 1),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_controller_calls_total",
			Help: "Calls to the controller by method and final gRPC code.",
		}, []string{"method", "code"})}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(c.calls); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
		if err := opts.Registerer.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "slingshot_agent_pod_vni_pool_free",
			Help: "Free pod-scoped VNIs in the node's local pool.",
		}, func() float64 { f, _ := c.pool.counts(); return float64(f) })); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return c, nil
}

// tokenCreds sends the token file's content as a bearer token.
type tokenCreds struct {
	path     string
	insecure bool
}

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	b, err := os.ReadFile(t.path)
	if err != nil {
		return nil, fmt.Errorf("read token: %w", err)
	}
	return map[string]string{"authorization": "Bearer " + strings.TrimSpace(string(b))}, nil
}

func (t tokenCreds) RequireTransportSecurity() bool { return !t.insecure }

// reconnect is how gRPC re-makes the connection to the controller. Its
// default backoff grows to 120 s: after a 150 s controller outage an
// agent's first call reached the restarted controller 32 s after it was
// serving again. Capped at 3 s, with jitter so that a cluster's agents do
// not reconnect in step (a few thousand connection attempts every few
// seconds are cheap for the controller, which refuses their calls while
// it loads). A connection attempt may take 5 s, the attempts' own
// backoff when that is longer: ample for a TLS handshake, short enough
// that a controller address that swallows packets is tried again soon.
var reconnect = grpc.ConnectParams{
	Backoff:           grpcbackoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// Dial returns a client of the controller at addr (host:port). The
// connection is made lazily and re-made after failures by gRPC itself,
// at most a few seconds apart ([reconnect]).
func Dial(addr string, opts Options) (*Client, error) {
	dopts := []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithConnectParams(reconnect),
		// The agent's version, for the controller's log of the agents'
		// versions (grpcapi.AgentVersions): a header, so that the wire
		// API stays as it is and older controllers ignore it.
		grpc.WithUserAgent(version.UserAgent()),
	}
	if opts.TLS != nil {
		dopts = append(dopts, grpc.WithTransportCredentials(credentials.NewTLS(opts.TLS)))
	} else {
		dopts = append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if opts.TokenFile != "" {
		if opts.TLS == nil && !opts.InsecureToken {
			return nil, errors.New("options: a token needs TLS (or InsecureToken)")
		}
		dopts = append(dopts, grpc.WithPerRPCCredentials(tokenCreds{path: opts.TokenFile, insecure: opts.InsecureToken}))
	}
	conn, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c, err := New(apiv1.NewControllerClient(conn), opts)
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.conn = conn
	return c, nil
}

// Close releases Dial's connection (a client from New has none); call it
// after Run has returned. It is safe to call twice.
func (c *Client) Close() error {
	var err error
	c.once.Do(func() {
		if c.conn != nil {
			err = c.conn.Close()
		}
	})
	return err
}

// ControllerVersion returns the controller's release as its last answer
// that named one said (from 0.3.0 every answer does, in the header
// version.ControllerHeader), or version.Unknown: before any answer, or
// from a controller before 0.3.0. An in-process controller's is this
// binary's. Safe for concurrent use.
func (c *Client) ControllerVersion() string {
	if v := c.peer.Load(); v != nil {
		return *v
	}
	return version.Unknown
}

// learnVersion keeps the controller's release that md, an answer's
// header, names.
func (c *Client) learnVersion(md metadata.MD) {
	for _, v := range md.Get(version.ControllerHeader) {
		if v, ok := version.FromPeer(v); ok {
			if old := c.peer.Load(); old == nil || *old != v {
				c.peer.Store(&v)
			}
			return
		}
	}
}

// call runs one RPC with the per-attempt timeout and the retry policy.
//
// rpc passes opts on to the API: they read the answer's header, where the
// controller names its release (see [Client.ControllerVersion]).
func (c *Client) call(ctx context.Context, method string, rpc func(ctx context.Context, opts ...grpc.CallOption) error) error {
	err := c.opts.Retry.Do(ctx, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
		defer cancel()
		var md metadata.MD
		err := rpc(actx, grpc.Header(&md))
		c.learnVersion(md)
		if err == nil || (retryable(err) && ctx.Err() == nil) {
			return err
		}
		return backoff.Permanent(err)
	})
	c.calls.WithLabelValues(method, status.Code(err).String()).Inc()
	if err != nil {
		var last error = err
		// Keep the status of the last attempt visible through the wrapping.
		for u := errors.Unwrap(last); u != nil; u = errors.Unwrap(u) {
			if _, ok := status.FromError(u); ok {
				last = u
			}
		}
		if st, ok := status.FromError(last); ok && st.Code() != codes.Unknown {
			if st.Code() == codes.Unimplemented {
				// A method the controller lacks: what the version-skew
				// policy adds anything but a field as.
				return &UnsupportedError{Method: method, What: "the controller does not serve this call",
					Agent: version.Version, Controller: c.ControllerVersion(), Err: fromStatus(last)}
			}
			return fmt.Errorf("%s: %w", method, fromStatus(last))
		}
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

// scopeOf returns the scope s names, and false for one this agent does
// not know: a newer controller's, or none (SCOPE_UNSPECIFIED, which no
// controller answers for a lease).
func scopeOf(s apiv1.Scope) (Scope, bool) {
	switch s {
	case apiv1.Scope_SCOPE_NONE:
		return ScopeNone, true
	case apiv1.Scope_SCOPE_JOB:
		return ScopeJob, true
	case apiv1.Scope_SCOPE_POD:
		return ScopePod, true
	case apiv1.Scope_SCOPE_CLAIM:
		return ScopeClaim, true
	}
	return "", false
}

// leaseOf reads the controller's answer to AcquireJobVNI. It returns what
// in it this agent does not know, "" when nothing: a scope it does not
// know, or a VNI out of range (VNIs are 16 bits; the wire's field is 32),
// which the old reading took for no scope or cut to 16 bits.
func leaseOf(resp *apiv1.JobVNILease) (Lease, string) {
	scope, ok := scopeOf(resp.GetScope())
	switch {
	case !ok && resp.GetScope() == apiv1.Scope_SCOPE_UNSPECIFIED:
		return Lease{}, "a lease with no scope"
	case !ok:
		return Lease{}, fmt.Sprintf("a lease of scope %d", resp.GetScope())
	case resp.GetVni() > math.MaxUint16:
		return Lease{}, fmt.Sprintf("a lease of VNI %d (a VNI is 0 to %d)", resp.GetVni(), math.MaxUint16)
	}
	l := Lease{Key: resp.GetKey(), VNI: uint16(resp.GetVni()), Scope: scope, NetworkRequest: resp.GetNetworkRequest()}
	if c := resp.GetCollectives(); c != nil {
		l.Collectives = &Collectives{JobID: c.GetJobId(), JobStepID: c.GetJobStepId(), Token: c.GetMcastToken(),
			FabricMgrURL: c.GetFabricMgrUrl(), AddrsPerJob: c.GetAddrsPerJob(), MinNodes: c.GetMinNodes()}
	}
	return l, ""
}

// AcquireJobVNI returns the VNI of the pod's job and records at the
// controller that this node holds it; a pod-scoped VNI from the node's
// slice comes from the local pool (Lease.Local). pod.Policy, when set,
// chooses the scope instead of the pod's annotation. Errors match
// ErrNotFound, ErrInvalidArgument (a malformed Policy too), ErrOwnerGone,
// ErrExhausted, ErrUnavailable (after retries), ErrDenied,
// ErrNoPodVNIPool or ErrUnsupported: an answer this agent does not know,
// refused and its lease released (see [UnsupportedError]).
func (c *Client) AcquireJobVNI(ctx context.Context, pod PodRef) (Lease, error) {
	var resp *apiv1.JobVNILease
	err := c.call(ctx, "AcquireJobVNI", func(ctx context.Context, opts ...grpc.CallOption) error {
		var err error
		resp, err = c.api.AcquireJobVNI(ctx, &apiv1.AcquireJobVNIRequest{
			Pod: &apiv1.PodRef{Namespace: pod.Namespace, Name: pod.Name, Uid: pod.UID}, Node: c.opts.Node, Policy: pod.Policy}, opts...)
		return err
	})
	if err != nil {
		return Lease{}, err
	}
	l, unknown := leaseOf(resp)
	if unknown != "" {
		return Lease{}, c.refuse(ctx, resp.GetKey(), &UnsupportedError{Method: "AcquireJobVNI",
			What:  "the controller answered " + unknown + ", which this agent does not know: refused, not misread",
			Agent: version.Version, Controller: c.ControllerVersion()})
	}
	if resp.GetFromNodeSlice() {
		v, err := c.PodVNI(ctx)
		if err != nil {
			return Lease{}, fmt.Errorf("pod vni for %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		l.VNI, l.Local = v, true
	}
	return l, nil
}

// refuse returns uerr, the refusal of an answer to AcquireJobVNI that
// named the lease key, after giving back the node's hold on it: the
// controller recorded this node as a holder before it answered, and
// nothing of this agent will ever hold or release the lease it did not
// understand. Caller's ctx may be ending (a pod's start that timed out):
// the release runs on its own, bounded by one call's timeout. Should it
// fail, the node's next report of the VNIs it uses (Options.InUseVNIs)
// lacks the lease's VNI, and the controller drops the hold after its
// grace period (Config.HoldGrace); the error says so.
func (c *Client) refuse(ctx context.Context, key string, uerr *UnsupportedError) error {
	if key == "" {
		return uerr // no lease, or none recorded for the node
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.CallTimeout)
	defer cancel()
	err := c.call(rctx, "ReleaseJobVNI", func(ctx context.Context, opts ...grpc.CallOption) error {
		_, err := c.api.ReleaseJobVNI(ctx, &apiv1.ReleaseJobVNIRequest{Key: key, Node: c.opts.Node}, opts...)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w; its lease %s is still held by this node at the controller, until the node's report of the VNIs it uses drops it: %w", uerr, key, err)
	}
	return uerr
}

// ReleaseJobVNI tells the controller that this node no longer holds the
// lease (a local one goes back to the pool). Releasing twice is harmless.
// Errors match ErrUnavailable (after retries), ErrInvalidArgument or
// ErrDenied.
func (c *Client) ReleaseJobVNI(ctx context.Context, l Lease) error {
	switch {
	case l.Scope == ScopeNone || l.Key == "" && !l.Local:
		return nil
	case l.Local:
		c.ReturnPodVNI(l.VNI)
		return nil
	}
	return c.call(ctx, "ReleaseJobVNI", func(ctx context.Context, opts ...grpc.CallOption) error {
		_, err := c.api.ReleaseJobVNI(ctx, &apiv1.ReleaseJobVNIRequest{Key: l.Key, Node: c.opts.Node}, opts...)
		return err
	})
}

// PodVNI returns a pod-scoped VNI from the node's pool with no network
// call. When the pool is empty it asks Run to refill and waits until then
// or until ctx ends. It returns ErrNoPodVNIPool when the controller has no
// pod VNI range.
func (c *Client) PodVNI(ctx context.Context) (uint16, error) {
	for {
		if c.pool.isOff() {
			return 0, ErrNoPodVNIPool
		}
		v, ok, changed := c.pool.take()
		if free, _ := c.pool.counts(); !ok || free < c.opts.LowWater {
			c.refill()
		}
		if ok {
			return v, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for pod vni pool refill: %w", ctx.Err())
		}
	}
}

// ReturnPodVNI gives a VNI from PodVNI back to the pool; it is handed out
// again only after every other free VNI.
func (c *Client) ReturnPodVNI(v uint16) { c.pool.put(v) }

// RestorePodVNIs marks VNIs of running pods in use, after an agent
// restart; call it before Run.
func (c *Client) RestorePodVNIs(vnis []uint16) { c.pool.restore(vnis) }

func (c *Client) refill() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Run heartbeats every Options.Heartbeat, refills the pod VNI pool ahead
// of need and gives back idle slices, until ctx ends; then it returns nil.
func (c *Client) Run(ctx context.Context) error {
	t := time.NewTicker(c.opts.Heartbeat)
	defer t.Stop()
	c.tick(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.tick(ctx)
		case <-c.kick:
			c.tick(ctx)
		}
	}
}

// tick renews the slices, settles give-backs whose outcome was unknown,
// and keeps the pool between LowWater and twice it.
func (c *Client) tick(ctx context.Context) {
	if err := c.Heartbeat(ctx); err != nil {
		if ctx.Err() == nil {
			c.opts.Logger.Warn("controller heartbeat", "err", err)
		}
		return
	}
	if c.pool.isOff() {
		return
	}
	for _, p := range c.pool.retryGiveBacks() {
		c.giveBack(ctx, p.index, p.gb)
	}
	free, held := c.pool.counts()
	if free < c.opts.LowWater && held < slices.MaxPerNode {
		if err := c.acquirePodSlices(ctx, held+1); err != nil && ctx.Err() == nil {
			c.opts.Logger.Warn("refill pod vni pool", "err", err)
		}
		return
	}
	if i, gb, ok := c.pool.beginGiveBack(2 * c.opts.LowWater); ok {
		c.giveBack(ctx, i, gb)
	}
}

// giveBack releases slice i, which beginGiveBack or retryGiveBacks took
// out of the pool, and settles it by the answer.
func (c *Client) giveBack(ctx context.Context, i int, gb *giveBack) {
	attempts := 0
	err := c.call(ctx, "ReleaseSlice", func(ctx context.Context, opts ...grpc.CallOption) error {
		attempts++
		_, err := c.api.ReleaseSlice(ctx, &apiv1.ReleaseSliceRequest{Node: c.opts.Node, Pool: slices.PodVNIPool, Index: uint32(i)}, opts...)
		return err
	})
	o := releaseOutcome(err, attempts)
	if o == unknown && ctx.Err() == nil {
		c.opts.Logger.Warn("slice give-back outcome unknown; its VNIs stay unused until a retry settles it", "index", i, "err", err)
	}
	c.pool.endGiveBack(i, gb, o)
}

// releaseOutcome reads a ReleaseSlice call's error. Only an answer that
// the controller gives before acting (a refused argument or credential)
// on the one attempt made proves that nothing was released: an earlier
// attempt that timed out, or a commit that failed, may have released it.
func releaseOutcome(err error, attempts int) giveBackOutcome {
	var e *Error
	switch {
	case err == nil || errors.Is(err, ErrNotFound):
		return released
	case attempts == 0:
		return refused // never sent
	case attempts == 1 && errors.As(err, &e) &&
		(e.Code == codes.InvalidArgument || e.Code == codes.PermissionDenied || e.Code == codes.Unauthenticated):
		return refused
	}
	return unknown
}

func heldVNISlices(in []*apiv1.Slice) map[int]vnialloc.Range {
	out := map[int]vnialloc.Range{}
	for _, s := range in {
		if s.GetPool() == slices.PodVNIPool && s.GetVniFirst() > 0 && s.GetVniFirst() <= s.GetVniLast() && s.GetVniLast() <= 65535 {
			out[int(s.GetIndex())] = vnialloc.Range{Min: uint16(s.GetVniFirst()), Max: uint16(s.GetVniLast())}
		}
	}
	return out
}

func (c *Client) acquirePodSlices(ctx context.Context, count int) error {
	var resp *apiv1.NodeSlices
	err := c.call(ctx, "AcquireSlices", func(ctx context.Context, opts ...grpc.CallOption) error {
		var err error
		resp, err = c.api.AcquireSlices(ctx, &apiv1.AcquireSlicesRequest{Node: c.opts.Node, Pool: slices.PodVNIPool, Count: uint32(count)}, opts...)
		return err
	})
	if errors.Is(err, ErrInvalidArgument) {
		// No pool of that name: pod-scoped VNIs come from the main range.
		c.pool.setOff(true)
		return nil
	}
	if err != nil {
		return err
	}
	c.pool.setSlices(heldVNISlices(resp.GetSlices()))
	return nil
}

// Heartbeat renews this node's slice leases once, reporting the VNIs in
// use per slice of the pod VNI pool and whether the pool hands them out
// without further report (open), the SliceHolder's reports of its IP
// slices, and every VNI the node uses (with Options.InUseVNIs); then it
// adopts the pod VNI slices the controller says the node holds and hands
// the answer to the SliceHolder. Heartbeats run one at a time. Run calls
// it; it is exported for agents that drive their own loop. Errors are the
// RenewSlices call's.
func (c *Client) Heartbeat(ctx context.Context) error {
	c.beat.Lock()
	defer c.beat.Unlock()
	use, reopen := c.pool.usage()
	var usage []*apiv1.SliceUsage
	for i, u := range use {
		usage = append(usage, &apiv1.SliceUsage{Pool: slices.PodVNIPool, Index: uint32(i), Allocated: uint32(u.allocated), Open: u.open})
	}
	holder, gen := c.holderAndGen()
	reports := c.holderReports(holder)
	for _, r := range reports {
		usage = append(usage, &apiv1.SliceUsage{Pool: r.Pool, Index: uint32(r.Index), Allocated: uint32(r.Allocated), Open: r.Open})
	}
	req := &apiv1.RenewSlicesRequest{Node: c.opts.Node, Usage: usage}
	if c.opts.InUseVNIs != nil {
		vnis, err := c.opts.InUseVNIs(ctx)
		if err != nil {
			c.opts.Logger.Warn("VNIs in use unknown; heartbeat without them", "err", err)
		} else {
			req.VnisReported = true
			for _, v := range vnis {
				req.InUseVnis = append(req.InUseVnis, uint32(v))
			}
		}
	}
	var resp *apiv1.RenewSlicesResponse
	err := c.call(ctx, "RenewSlices", func(ctx context.Context, opts ...grpc.CallOption) error {
		var err error
		resp, err = c.api.RenewSlices(ctx, req, opts...)
		return err
	})
	if err != nil {
		return err
	}
	for _, l := range resp.GetLost() {
		c.opts.Logger.Warn("controller no longer leases a slice to this node", "pool", l.GetPool(), "index", l.GetIndex(), "allocated", l.GetAllocated())
	}
	c.pool.setSlices(heldVNISlices(resp.GetHeld()))
	c.pool.reopened(reopen)
	if holder != nil {
		c.deliver(holder, gen, reports, resp)
	}
	return nil
}
