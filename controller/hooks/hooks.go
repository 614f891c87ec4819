package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Service is what the hooks need of the controller.
type Service interface {
	AcquireOwnerVNI(ctx context.Context, owner store.Owner, policy controller.Policy) (controller.Lease, error)
	FinalizeOwner(ctx context.Context, owner store.Owner, deleting bool) (controller.Lease, bool, error)
}

// Parents reads a hook's parent from the API server; [owner.Resolver]
// implements it. Lookup reads the object of o's kind, namespace and name,
// whatever its UID, and returns nil when there is none.
type Parents interface {
	Lookup(ctx context.Context, o store.Owner) (*metav1.PartialObjectMetadata, error)
}

// GroupKind names a followed owner kind.
type GroupKind struct{ Group, Kind string }

// Handler serves /sync and /finalize. It is safe for concurrent use.
type Handler struct {
	svc      Service
	parents  Parents
	followed map[GroupKind]bool
	log      *slog.Logger
	latency  *prometheus.HistogramVec
	refused  *prometheus.CounterVec
	mux      *http.ServeMux
}

// New returns a handler over svc. parents confirms every request body
// with the API server before the hook acts on it; nil trusts the bodies
// (the controller without a Kubernetes API), and then the hooks must not
// be reachable by untrusted clients. followed are the owner kinds pods
// are keyed by; an object controlled by one of them gets no VNI of its
// own. reg may be nil.
func New(svc Service, parents Parents, followed []GroupKind, log *slog.Logger, reg prometheus.Registerer) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{svc: svc, parents: parents, followed: map[GroupKind]bool{}, log: log, mux: http.NewServeMux(),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slingshot_controller_hook_duration_seconds",
			Help:    "Metacontroller hook latency by hook and HTTP code.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"hook", "code"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_controller_hook_refused_total",
			Help: "Hook requests the controller did not act on because the API server contradicts their body, by hook and reason (" + reasonList + ").",
		}, []string{"hook", "reason"})}
	for _, k := range followed {
		h.followed[k] = true
	}
	// Every refusal a hook can give starts at 0, so that the first one is
	// an increase an alert's rate() sees rather than a new series.
	for hook, reasons := range refusals {
		for _, r := range reasons {
			h.refused.WithLabelValues(hook, r)
		}
	}
	if reg != nil {
		reg.MustRegister(h.latency, h.refused)
	}
	h.mux.HandleFunc("POST /sync", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, "sync", h.Sync) })
	h.mux.HandleFunc("POST /finalize", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, "finalize", h.Finalize) })
	return h
}

// refusals are the reasons each hook can refuse a request for.
var refusals = map[string][]string{
	"sync":     {ReasonNoParent, ReasonUIDMismatch, ReasonKindNotFollowed, ReasonParentDeleting},
	"finalize": {ReasonParentAlive, ReasonKindNotFollowed},
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// httpError carries an HTTP status for a hook error.
type httpError struct {
	code       int
	retryAfter int
	err        error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, name string, hook func(context.Context, *Request) (*Response, error)) {
	start := time.Now()
	code := http.StatusOK
	defer func() { h.latency.WithLabelValues(name, strconv.Itoa(code)).Observe(time.Since(start).Seconds()) }()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	var resp *Response
	if err == nil {
		var req *Request
		if req, err = ParseRequest(body); err == nil {
			resp, err = hook(r.Context(), req)
		}
	}
	if err != nil {
		he := &httpError{code: http.StatusInternalServerError, err: err}
		switch {
		case errors.As(err, &he):
		case errors.Is(err, ErrBadRequest), errors.Is(err, controller.ErrInvalidArgument):
			he.code = http.StatusBadRequest
		case errors.Is(err, ErrRefused):
			he.code = http.StatusConflict
		case errors.Is(err, controller.ErrUnavailable):
			he.code, he.retryAfter = http.StatusTooManyRequests, retryLoadingSeconds
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			he.code = http.StatusRequestEntityTooLarge
		}
		code = he.code
		var re *RefusedError
		if errors.As(err, &re) {
			h.refused.WithLabelValues(name, re.Reason).Inc()
		}
		h.log.Warn("hook failed", "hook", name, "code", code, "err", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if he.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(he.retryAfter))
		}
		w.WriteHeader(code)
		fmt.Fprintln(w, err.Error())
		return
	}
	out, err := json.Marshal(resp)
	if err != nil {
		code = http.StatusInternalServerError
		http.Error(w, err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(out)
}

func ownerOf(o *Object) store.Owner {
	return store.Owner{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, UID: o.Metadata.UID}
}

func groupOf(apiVersion string) string {
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		return g
	}
	return ""
}

// controlledByFollowed reports whether o's controller is a followed kind.
func (h *Handler) controlledByFollowed(o *Object) bool {
	for _, ref := range o.Metadata.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && h.followed[GroupKind{groupOf(ref.APIVersion), ref.Kind}] {
			return true
		}
	}
	return false
}

func str(s string) *string { return &s }

func empty() *Response {
	return &Response{Labels: map[string]*string{}, Annotations: map[string]*string{}, Attachments: []VNIObject{}}
}

func attachment(o *Object, l controller.Lease) VNIObject {
	return VNIObject{
		APIVersion: APIVersion, Kind: KindVNI,
		Metadata: ObjectMeta{Name: "vni-" + o.Metadata.UID, Namespace: o.Metadata.Namespace,
			Labels: map[string]string{LabelOwnerUID: o.Metadata.UID}},
		Spec: VNISpec{VNI: l.VNI, Scope: string(l.Scope), LeaseKey: l.Key,
			Owner: OwnerRef{APIVersion: l.Owner.APIVersion, Kind: l.Owner.Kind, Name: l.Owner.Name, UID: l.Owner.UID}},
	}
}

// Sync is the /sync hook. It leases nothing for a parent the API server
// does not hold with the body's UID (an error wrapping ErrRefused), nor for
// one being deleted, and reads the parent's annotations and owners from
// the API server rather than from the body. Errors wrap
// controller.ErrUnavailable while the state loads or the API server cannot
// be read.
func (h *Handler) Sync(ctx context.Context, req *Request) (*Response, error) {
	o := req.Object
	resp := empty()
	if h.parents != nil {
		meta, err := h.confirm(ctx, o)
		if err != nil {
			return nil, err
		}
		if meta.DeletionTimestamp != nil {
			// A stale sync (Metacontroller's cache lags, or its finalizer
			// is gone while others hold the parent): a VNI leased now
			// would outlive the parent until a sweep. Nothing to lease.
			h.refused.WithLabelValues("sync", ReasonParentDeleting).Inc()
			return resp, nil
		}
		o = trusted(o, meta)
	}
	if h.controlledByFollowed(o) {
		return resp, nil
	}
	policy, err := controller.ParsePolicy(o.Metadata.Annotations[controller.AnnotationVNI])
	if err != nil {
		resp.Annotations[AnnotationError] = str(err.Error())
		resp.Annotations[AnnotationAssigned] = nil
		return resp, nil
	}
	l, err := h.svc.AcquireOwnerVNI(ctx, ownerOf(o), policy)
	var ex *controller.ExhaustedError
	switch {
	case errors.As(err, &ex), errors.Is(err, controller.ErrNotFound), errors.Is(err, controller.ErrOwnerGone),
		errors.Is(err, controller.ErrInvalidArgument):
		resp.Annotations[AnnotationError] = str(err.Error())
		resp.ResyncAfterSeconds = resyncFullSeconds
		return resp, nil
	case err != nil:
		return nil, err
	}
	resp.Annotations[AnnotationError] = nil
	if l.Scope == controller.ScopeNone || l.VNI == 0 {
		resp.Annotations[AnnotationAssigned] = nil
		return resp, nil
	}
	resp.Annotations[AnnotationAssigned] = str(strconv.Itoa(int(l.VNI)))
	resp.Attachments = append(resp.Attachments, attachment(o, l))
	return resp, nil
}

// Finalize is the /finalize hook. It marks the owner gone only when the
// API server agrees: the parent is gone, has another UID now, or has a
// deletionTimestamp; otherwise it returns an error wrapping ErrRefused.
// Errors wrap controller.ErrUnavailable while the state loads or the API
// server cannot be read.
func (h *Handler) Finalize(ctx context.Context, req *Request) (*Response, error) {
	o := req.Object
	resp := empty()
	deleting := o.Metadata.DeletionTimestamp != nil
	if deleting && h.parents != nil {
		if err := h.confirmGone(ctx, o); err != nil {
			return nil, err
		}
	}
	l, done, err := h.svc.FinalizeOwner(ctx, ownerOf(o), deleting)
	if err != nil {
		return nil, err
	}
	switch {
	case !done:
		// Nodes still hold the VNI: keep the attachment, poll.
		resp.Attachments = append(resp.Attachments, attachment(o, l))
		resp.ResyncAfterSeconds = resyncDrainSeconds
	case req.observedVNIs() > 0 && deleting:
		// Released; let Metacontroller delete the attachment first.
		resp.ResyncAfterSeconds = resyncCleanupSeconds
	default:
		resp.Finalized = true
	}
	return resp, nil
}
