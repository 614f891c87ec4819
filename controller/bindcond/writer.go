package bindcond

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/internal/draclaim"
)

// Leaser is the controller's Allocator, as the writer uses it.
type Leaser interface {
	AcquireJobVNIWithPolicy(ctx context.Context, pod controller.PodRef, node, policy string) (controller.Lease, error)
	NodeSeen(node string) (time.Time, bool)
	// Loaded is closed once the state is loaded: nothing is leased
	// before (a replica that does not lead never is).
	Loaded() <-chan struct{}
}

// ConditionWriter writes one condition on devices of a claim;
// APIConditions is the real one.
type ConditionWriter interface {
	WriteCondition(ctx context.Context, claim *resourceapi.ResourceClaim, devs []Device, cond metav1.Condition) error
}

// FieldManager names the controller's writes of the conditions, apart
// from the agent's writes of the same entries' data.
const FieldManager = "slingshot-controller"

// APIConditions writes with server-side apply: status.devices is a map
// list keyed by driver, pool, device and share, so the entries applied
// carry only the condition fields this manager owns, and the agent's
// data and networkData in the same entries stay the agent's. The write
// needs resourceclaims/driver's arbitrary-node:patch verb for the driver.
type APIConditions struct {
	Client kubernetes.Interface
	Driver string
}

// WriteCondition implements ConditionWriter, on the claim of the UID it
// was read with only.
func (a APIConditions) WriteCondition(ctx context.Context, claim *resourceapi.ResourceClaim, devs []Device, cond metav1.Condition) error {
	status := resourceac.ResourceClaimStatus()
	for _, d := range devs {
		dev := resourceac.AllocatedDeviceStatus().WithDriver(a.Driver).WithPool(d.Pool).WithDevice(d.Device).
			WithConditions(metav1ac.Condition().WithType(cond.Type).WithStatus(cond.Status).WithReason(cond.Reason).
				WithMessage(cond.Message).WithLastTransitionTime(cond.LastTransitionTime))
		if d.ShareID != "" {
			dev.WithShareID(d.ShareID)
		}
		status.WithDevices(dev)
	}
	ac := resourceac.ResourceClaim(claim.Name, claim.Namespace).WithUID(types.UID(claim.UID)).WithStatus(status)
	if _, err := a.Client.ResourceV1().ResourceClaims(claim.Namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("write %s on claim %s/%s: %w", cond.Type, claim.Namespace, claim.Name, err)
	}
	return nil
}

// Options tune a Writer; zero fields take the defaults.
type Options struct {
	// Driver is the agent's DRA driver name; required.
	Driver string
	// Workers lease and write in parallel, each claim by one at a time;
	// default 16 (a backlog of 2,000 claims on a real API server: 516
	// claims/s, against 296 with 4; TestBindingConditionsBacklog).
	Workers int
	// NodeStale is how long a node's agent may go unheard before its
	// claims fail with NodeAgentUnreachable; default 30 s (three of the
	// agent's default 10 s heartbeats). Negative: never.
	NodeStale time.Duration
	// Attempts bounds the leases tried while the controller's state is
	// unavailable (reloading after a failed commit), spaced by the
	// queue's backoff (5 ms doubling to 5 s): past them the claim fails
	// with ControllerUnavailable and the scheduler tries again. Default 30,
	// about two minutes.
	Attempts int
	Logger   *slog.Logger
	// Registerer for the metric; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// GroupClaims leases the VNI of a pod's PodGroup claim for its NIC
	// claims that leave their VNI to the job, as the agent's Prepare does
	// with --dra-podgroup-claims (draclaim.GroupClaimOf): each waiting
	// claim then costs a read of its pod and of the pod's other claims.
	GroupClaims bool
}

// Writer writes the binding conditions of the claims allocated the
// driver's devices. Run writes until its context ends.
type Writer struct {
	client kubernetes.Interface
	l      Leaser
	w      ConditionWriter
	o      Options
	log    *slog.Logger
	writes *prometheus.CounterVec
}

// New returns a Writer watching claims through client.
func New(client kubernetes.Interface, l Leaser, w ConditionWriter, o Options) (*Writer, error) {
	if o.Driver == "" {
		return nil, errors.New("bindcond: Options.Driver is required")
	}
	if o.Workers <= 0 {
		o.Workers = 16
	}
	if o.NodeStale == 0 {
		o.NodeStale = 30 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 30
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	wr := &Writer{client: client, l: l, w: w, o: o, log: o.Logger,
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_controller_binding_conditions_total",
			Help: "Binding conditions written on DRA claims' NIC devices, by condition (VNILeased, VNILeaseFailed) and reason.",
		}, []string{"condition", "reason"})}
	if o.Registerer != nil {
		if err := o.Registerer.Register(wr.writes); err != nil {
			return nil, fmt.Errorf("bindcond: register metric: %w", err)
		}
	}
	return wr, nil
}

// Run watches the claims and writes their conditions, once the
// controller's state is loaded, until ctx ends.
func (wr *Writer) Run(ctx context.Context) error {
	select {
	case <-wr.l.Loaded():
	case <-ctx.Done():
		return nil
	}
	loadedAt := wr.o.Now()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 5*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "binding-conditions"})
	defer q.ShutDown()
	f := informers.NewSharedInformerFactory(wr.client, 0)
	inf := f.Resource().V1().ResourceClaims()
	enqueue := func(obj any) {
		if c, ok := obj.(*resourceapi.ResourceClaim); ok && len(awaiting(c, wr.o.Driver)) > 0 {
			if key, err := cache.MetaNamespaceKeyFunc(c); err == nil {
				q.Add(key)
			}
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return fmt.Errorf("resourceclaim informer: %w", err)
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return nil
	}
	wr.log.Info("writing binding conditions", "driver", wr.o.Driver, "node_stale", wr.o.NodeStale)
	lister := inf.Lister()
	done := make(chan struct{})
	for range wr.o.Workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for wr.next(ctx, q, lister, loadedAt) {
			}
		}()
	}
	<-ctx.Done()
	q.ShutDown()
	for range wr.o.Workers {
		<-done
	}
	return nil
}

// next handles one queued claim; false once the queue is shut down.
func (wr *Writer) next(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], lister resourcelisters.ResourceClaimLister, loadedAt time.Time) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		q.Forget(key)
		return true
	}
	claim, err := lister.ResourceClaims(ns).Get(name)
	if err != nil {
		// Deleted: nothing to write.
		q.Forget(key)
		return true
	}
	tries := q.NumRequeues(key)
	switch out := wr.Sync(ctx, claim, loadedAt, tries); {
	case out.retry && tries+1 < wr.o.Attempts:
		q.AddRateLimited(key)
	case out.retry:
		// Its next change brings it back.
		wr.log.Error("binding condition not written; gave up", "claim", key, "attempts", tries+1)
		q.Forget(key)
	case out.after > 0:
		q.Forget(key)
		q.AddAfter(key, out.after)
	default:
		q.Forget(key)
	}
	return true
}

// outcome is what a Sync asks of the queue: nothing more (the claim's
// next change brings it back if need be), a retry with backoff, or a
// look again after a while.
type outcome struct {
	retry bool
	after time.Duration
	// wrote is the condition written, "" for none.
	wrote string
}

// Sync brings one claim's conditions up to date: it leases the claim's
// VNI for its node and writes VNILeased, or writes VNILeaseFailed, or
// leaves the claim to wait. attempts is how many times it was tried
// before. Errors are logged; the outcome says whether to retry.
func (wr *Writer) Sync(ctx context.Context, claim *resourceapi.ResourceClaim, loadedAt time.Time, attempts int) outcome {
	devs := awaiting(claim, wr.o.Driver)
	if len(devs) == 0 {
		return outcome{}
	}
	v := decide(claim, wr.o.Driver, nodeClock{now: wr.o.Now(), loadedAt: loadedAt, seen: wr.l.NodeSeen, stale: max(wr.o.NodeStale, 0)})
	if v.wait {
		return outcome{after: v.retryAfter}
	}
	if v.lease && wr.o.GroupClaims && draclaim.InheritsGroupVNI(v.policy) {
		group, err := draclaim.GroupClaimOf(ctx, apiReader{wr.client}, wr.o.Driver,
			draclaim.ReservedPod{Namespace: v.pod.Namespace, Name: v.pod.Name, UID: v.pod.UID}, claim.Name)
		switch {
		case errors.Is(err, draclaim.ErrTwoGroupClaims):
			v = verdict{failed: true, reason: ReasonInvalidConfig, message: err.Error()}
		case err != nil && attempts+1 < wr.o.Attempts:
			wr.log.Info("the PodGroup claim of a claim's pod; will retry", "claim", claimKey(claim), "err", err)
			return outcome{retry: true}
		case err != nil:
			v = verdict{failed: true, reason: ReasonControllerUnavailable, message: err.Error()}
		case group != nil:
			v.policy = draclaim.GroupPolicy(group)
		}
	}
	cond := metav1.Condition{Type: draclaim.ConditionVNILeaseFailed, Status: metav1.ConditionTrue, Reason: v.reason, Message: v.message}
	if v.lease {
		l, err := wr.l.AcquireJobVNIWithPolicy(ctx, v.pod, v.node, v.policy)
		ok, reason, msg, retry := leaseVerdict(l, v.node, err)
		if retry && attempts+1 < wr.o.Attempts {
			wr.log.Info("lease for a claim's binding condition; will retry", "claim", claimKey(claim), "node", v.node, "attempt", attempts+1, "err", err)
			return outcome{retry: true}
		}
		if ok {
			cond.Type = draclaim.ConditionVNILeased
		}
		cond.Reason, cond.Message = reason, msg
	}
	cond.LastTransitionTime = metav1.NewTime(wr.o.Now())
	if err := wr.w.WriteCondition(ctx, claim, devs, cond); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Gone, or made again under its name (another UID): the
			// informer brings the new one.
			return outcome{}
		}
		wr.log.Warn("write a claim's binding condition; will retry", "claim", claimKey(claim), "condition", cond.Type, "err", err)
		return outcome{retry: true}
	}
	wr.writes.WithLabelValues(cond.Type, cond.Reason).Inc()
	wr.log.Info("binding condition written", "claim", claimKey(claim), "condition", cond.Type, "reason", cond.Reason, "message", cond.Message)
	return outcome{wrote: cond.Type}
}

func claimKey(c *resourceapi.ResourceClaim) string { return c.Namespace + "/" + c.Name }

// apiReader reads a pod and its claims from the API server, not the
// watch: the scheduler writes a pod's claims one after another, and the
// group claim must be seen as allocated with the claim that waits.
type apiReader struct{ client kubernetes.Interface }

func (r apiReader) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return r.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (r apiReader) GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	return r.client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}
