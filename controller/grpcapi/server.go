package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// ErrorDomain is the ErrorInfo domain of the controller's errors.
const ErrorDomain = "slingshot.hpe.com"

// ErrorInfo reasons.
const (
	ReasonRangeFull = "RANGE_FULL"
	ReasonLoading   = "LOADING"
	ReasonOwnerGone = "OWNER_GONE"
	ReasonNotFound  = "NOT_FOUND"
	ReasonInvalid   = "INVALID_ARGUMENT"
	ReasonForbidden = "WRONG_NODE"
	ReasonNoNode    = "NO_NODE"
	ReasonInternal  = "INTERNAL"
	// ReasonSliceTaken: AcquireSlices named a slice another node leases;
	// metadata "pool", "index", "slice" and "node" say which and whose.
	ReasonSliceTaken = "SLICE_TAKEN"
)

// Server implements apiv1.ControllerServer over a Service.
type Server struct {
	apiv1.UnimplementedControllerServer
	svc     *controller.Allocator
	ttl     time.Duration
	refused *prometheus.CounterVec
}

var _ apiv1.ControllerServer = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithRegisterer registers the server's metrics with reg:
// slingshot_controller_grpc_node_refused_total{method,reason}.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(s *Server) { reg.MustRegister(s.refused) }
}

// NewServer returns a server over svc; sliceTTL is reported to agents.
func NewServer(svc *controller.Allocator, sliceTTL time.Duration, opts ...Option) *Server {
	s := &Server{svc: svc, ttl: sliceTTL, refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slingshot_controller_grpc_node_refused_total",
		Help: "Node-scoped calls refused because the caller is bound to another node (reason wrong_node) or its credential names no node (no_node).",
	}, []string{"method", "reason"})}
	for _, o := range opts {
		o(s)
	}
	return s
}

// checkNode authorizes a call of method that acts for node (see
// [auth.CheckNode]) and counts a refusal.
func (s *Server) checkNode(ctx context.Context, method, node string) error {
	err := auth.CheckNode(ctx, node)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, auth.ErrNoNode):
		s.refused.WithLabelValues(method, "no_node").Inc()
	default:
		s.refused.WithLabelValues(method, "wrong_node").Inc()
	}
	return Status(err)
}

// Register registers the server on s.
func (s *Server) Register(g *grpc.Server) { apiv1.RegisterControllerServer(g, s) }

// Status converts a controller error to a gRPC status error with details.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isControllerErr(err) {
		return err
	}
	var code codes.Code
	info := &errdetails.ErrorInfo{Domain: ErrorDomain}
	var details []protoadapt.MessageV1
	var fe *controller.FieldError
	var ex *controller.ExhaustedError
	var taken *slices.TakenError
	switch {
	case errors.As(err, &fe):
		code, info.Reason = codes.InvalidArgument, ReasonInvalid
		details = append(details, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: fe.Field, Description: fe.Reason}}})
	case errors.As(err, &ex):
		code, info.Reason = codes.ResourceExhausted, ReasonRangeFull
		info.Metadata = map[string]string{"resource": ex.Resource, "range": ex.Range, "capacity": strconv.Itoa(ex.Capacity)}
	case errors.As(err, &taken):
		code, info.Reason = codes.AlreadyExists, ReasonSliceTaken
		info.Metadata = map[string]string{"pool": taken.Pool, "index": strconv.Itoa(taken.Index), "slice": taken.Slice, "node": taken.Node}
	case errors.Is(err, controller.ErrInvalidArgument):
		code, info.Reason = codes.InvalidArgument, ReasonInvalid
	case errors.Is(err, controller.ErrUnavailable):
		code, info.Reason = codes.Unavailable, ReasonLoading
		details = append(details, &errdetails.RetryInfo{})
	case errors.Is(err, controller.ErrNotFound):
		code, info.Reason = codes.NotFound, ReasonNotFound
	case errors.Is(err, controller.ErrOwnerGone):
		code, info.Reason = codes.FailedPrecondition, ReasonOwnerGone
	case errors.Is(err, auth.ErrNoNode):
		code, info.Reason = codes.PermissionDenied, ReasonNoNode
	case errors.Is(err, auth.ErrForbidden):
		code, info.Reason = codes.PermissionDenied, ReasonForbidden
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	default:
		code, info.Reason = codes.Internal, ReasonInternal
	}
	st := status.New(code, err.Error())
	withDetails, derr := st.WithDetails(append([]protoadapt.MessageV1{info}, details...)...)
	if derr != nil {
		return st.Err()
	}
	return withDetails.Err()
}

func isControllerErr(err error) bool {
	for _, e := range []error{controller.ErrInvalidArgument, controller.ErrExhausted, controller.ErrUnavailable,
		controller.ErrNotFound, controller.ErrOwnerGone, auth.ErrForbidden, slices.ErrTaken} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func scopeToProto(s store.Scope) apiv1.Scope {
	switch s {
	case controller.ScopeNone:
		return apiv1.Scope_SCOPE_NONE
	case store.ScopeJob:
		return apiv1.Scope_SCOPE_JOB
	case store.ScopePod:
		return apiv1.Scope_SCOPE_POD
	case store.ScopeClaim:
		return apiv1.Scope_SCOPE_CLAIM
	}
	return apiv1.Scope_SCOPE_UNSPECIFIED
}

func leaseToProto(l controller.Lease) *apiv1.JobVNILease {
	out := &apiv1.JobVNILease{Key: l.Key, Vni: uint32(l.VNI), Scope: scopeToProto(l.Scope), Nodes: l.Nodes,
		OwnerGone: l.OwnerGone, FromNodeSlice: l.FromNodeSlice, NetworkRequest: l.NetworkRequest}
	if !l.Created.IsZero() {
		out.CreatedUnixMs = l.Created.UnixMilli()
	}
	if l.Owner != (store.Owner{}) {
		out.Owner = &apiv1.OwnerRef{ApiVersion: l.Owner.APIVersion, Kind: l.Owner.Kind, Namespace: l.Owner.Namespace,
			Name: l.Owner.Name, Uid: l.Owner.UID}
	}
	if c := l.Collectives; c != nil {
		out.Collectives = &apiv1.HWCollectives{JobId: c.JobID, JobStepId: c.JobStepID, McastToken: c.Token,
			FabricMgrUrl: c.FabricMgrURL, AddrsPerJob: uint32(c.AddrsPerJob), MinNodes: uint32(c.MinNodes)}
	}
	return out
}

func sliceToProto(s controller.Slice) *apiv1.Slice {
	out := &apiv1.Slice{Pool: s.Pool, Index: uint32(s.Index), Node: s.Node, ExpiresUnixMs: s.Expires.UnixMilli(),
		Allocated: uint32(s.Allocated), Open: s.Open}
	if !s.VNIs.Empty() {
		out.VniFirst, out.VniLast = uint32(s.VNIs.Min), uint32(s.VNIs.Max)
	} else if s.Prefix.IsValid() {
		out.Prefix = s.Prefix.String()
	}
	return out
}

func slicesToProto(in []controller.Slice) []*apiv1.Slice {
	out := make([]*apiv1.Slice, 0, len(in))
	for _, s := range in {
		out = append(out, sliceToProto(s))
	}
	return out
}

// AcquireJobVNI implements apiv1.ControllerServer.
func (s *Server) AcquireJobVNI(ctx context.Context, req *apiv1.AcquireJobVNIRequest) (*apiv1.JobVNILease, error) {
	if err := s.checkNode(ctx, "AcquireJobVNI", req.GetNode()); err != nil {
		return nil, err
	}
	p := req.GetPod()
	l, err := s.svc.AcquireJobVNIWithPolicy(ctx, controller.PodRef{Namespace: p.GetNamespace(), Name: p.GetName(), UID: p.GetUid()},
		req.GetNode(), req.GetPolicy())
	if err != nil {
		return nil, Status(err)
	}
	return leaseToProto(l), nil
}

// ReleaseJobVNI implements apiv1.ControllerServer.
func (s *Server) ReleaseJobVNI(ctx context.Context, req *apiv1.ReleaseJobVNIRequest) (*apiv1.JobVNILease, error) {
	if err := s.checkNode(ctx, "ReleaseJobVNI", req.GetNode()); err != nil {
		return nil, err
	}
	l, err := s.svc.ReleaseJobVNI(ctx, req.GetKey(), req.GetNode())
	if err != nil {
		return nil, Status(err)
	}
	return leaseToProto(l), nil
}

func intField(name string, v uint32, max int) (int, error) {
	if int64(v) > int64(max) {
		return 0, &controller.FieldError{Field: name, Reason: fmt.Sprintf("%d above %d", v, max)}
	}
	return int(v), nil
}

// AcquireSlices implements apiv1.ControllerServer: with an index it
// leases that one slice, else count slices.
func (s *Server) AcquireSlices(ctx context.Context, req *apiv1.AcquireSlicesRequest) (*apiv1.NodeSlices, error) {
	if err := s.checkNode(ctx, "AcquireSlices", req.GetNode()); err != nil {
		return nil, err
	}
	var held []controller.Slice
	var err error
	if req.Index != nil {
		var idx int
		if idx, err = intField("index", req.GetIndex(), 1<<20); err == nil {
			held, err = s.svc.AcquireSliceAt(ctx, req.GetNode(), req.GetPool(), idx)
		}
	} else {
		var count int
		if count, err = intField("count", req.GetCount(), 1<<20); err == nil {
			held, err = s.svc.AcquireSlices(ctx, req.GetNode(), req.GetPool(), count)
		}
	}
	if err != nil {
		return nil, Status(err)
	}
	return &apiv1.NodeSlices{Slices: slicesToProto(held)}, nil
}

// RenewSlices implements apiv1.ControllerServer.
func (s *Server) RenewSlices(ctx context.Context, req *apiv1.RenewSlicesRequest) (*apiv1.RenewSlicesResponse, error) {
	if err := s.checkNode(ctx, "RenewSlices", req.GetNode()); err != nil {
		return nil, err
	}
	if len(req.GetUsage()) > 4096 {
		return nil, Status(&controller.FieldError{Field: "usage", Reason: "more than 4096 entries"})
	}
	usage := make([]controller.SliceUsage, 0, len(req.GetUsage()))
	for i, u := range req.GetUsage() {
		idx, err := intField(fmt.Sprintf("usage[%d].index", i), u.GetIndex(), 1<<20)
		if err != nil {
			return nil, Status(err)
		}
		n, err := intField(fmt.Sprintf("usage[%d].allocated", i), u.GetAllocated(), 1<<30)
		if err != nil {
			return nil, Status(err)
		}
		usage = append(usage, controller.SliceUsage{Pool: u.GetPool(), Index: idx, Allocated: n, Open: u.GetOpen()})
	}
	if req.GetVnisReported() {
		vnis, err := vniList("in_use_vnis", req.GetInUseVnis())
		if err != nil {
			return nil, Status(err)
		}
		if err := s.svc.ReportVNIsInUse(req.GetNode(), vnis); err != nil {
			return nil, Status(err)
		}
	}
	held, lost, err := s.svc.RenewSlices(ctx, req.GetNode(), usage)
	if err != nil {
		return nil, Status(err)
	}
	out := &apiv1.RenewSlicesResponse{Held: slicesToProto(held), TtlMs: s.ttl.Milliseconds()}
	for _, l := range lost {
		out.Lost = append(out.Lost, &apiv1.SliceUsage{Pool: l.Pool, Index: uint32(l.Index), Allocated: uint32(l.Allocated), Open: l.Open})
	}
	return out, nil
}

// vniList checks a list of VNIs from a request.
func vniList(field string, in []uint32) ([]uint16, error) {
	if len(in) > 65536 {
		return nil, &controller.FieldError{Field: field, Reason: "more than 65536 entries"}
	}
	out := make([]uint16, len(in))
	for i, v := range in {
		if v > 65535 {
			return nil, &controller.FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Reason: fmt.Sprintf("%d is not a VNI (0-65535)", v)}
		}
		out[i] = uint16(v)
	}
	return out, nil
}

// ReleaseSlice implements apiv1.ControllerServer.
func (s *Server) ReleaseSlice(ctx context.Context, req *apiv1.ReleaseSliceRequest) (*apiv1.ReleaseSliceResponse, error) {
	if err := s.checkNode(ctx, "ReleaseSlice", req.GetNode()); err != nil {
		return nil, err
	}
	idx, err := intField("index", req.GetIndex(), 1<<20)
	if err != nil {
		return nil, Status(err)
	}
	if err := s.svc.ReleaseSlice(ctx, req.GetNode(), req.GetPool(), idx); err != nil {
		return nil, Status(err)
	}
	return &apiv1.ReleaseSliceResponse{}, nil
}

// ListVNIs implements apiv1.ControllerServer.
func (s *Server) ListVNIs(ctx context.Context, _ *apiv1.ListVNIsRequest) (*apiv1.ListVNIsResponse, error) {
	leases, q, err := s.svc.ListLeases()
	if err != nil {
		return nil, Status(err)
	}
	r, err := s.svc.VNIRange()
	if err != nil {
		return nil, Status(err)
	}
	out := &apiv1.ListVNIsResponse{Range: r.Range.String(), PodRange: r.PodRange.String(), Capacity: uint32(r.Capacity)}
	for _, l := range leases {
		out.Leases = append(out.Leases, leaseToProto(l))
	}
	for _, v := range q {
		out.Quarantined = append(out.Quarantined, &apiv1.QuarantinedVNI{Vni: uint32(v.VNI), ReleasedUnixMs: v.Released.UnixMilli()})
	}
	return out, nil
}

// ListSlices implements apiv1.ControllerServer.
func (s *Server) ListSlices(ctx context.Context, req *apiv1.ListSlicesRequest) (*apiv1.ListSlicesResponse, error) {
	sl, pools, err := s.svc.ListSlices(req.GetPool(), req.GetNode())
	if err != nil {
		return nil, Status(err)
	}
	out := &apiv1.ListSlicesResponse{Slices: slicesToProto(sl)}
	for _, p := range pools {
		out.Pools = append(out.Pools, &apiv1.Pool{Name: p.Spec.Name, Spec: p.Spec.String(), Slices: uint32(p.Slices), Leased: uint32(p.Leased)})
	}
	return out, nil
}

// MetricsInterceptor observes every call's latency and code as
// slingshot_controller_grpc_request_duration_seconds{method,code}.
func MetricsInterceptor(reg prometheus.Registerer) grpc.UnaryServerInterceptor {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "slingshot_controller_grpc_request_duration_seconds",
		Help:    "gRPC request latency by method and status code.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"method", "code"})
	if reg != nil {
		reg.MustRegister(h)
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		h.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(time.Since(start).Seconds())
		return resp, err
	}
}
