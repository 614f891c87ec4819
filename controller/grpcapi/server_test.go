package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// serve runs svc behind a real gRPC server on loopback and returns a
// client; run says whether to start the service (false keeps it loading).
func serve(t testing.TB, cfg controller.Config, run bool, opts ...grpc.ServerOption) (apiv1.ControllerClient, *controller.Allocator) {
	t.Helper()
	return serveWith(t, cfg, run, nil, nil, opts...)
}

// serveWith is serve with a resolver (nil: none, as embedded) and options
// of the API server.
func serveWith(t testing.TB, cfg controller.Config, run bool, res controller.Resolver, srvOpts []Option, opts ...grpc.ServerOption) (apiv1.ControllerClient, *controller.Allocator) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	var svc *controller.Allocator
	if run {
		svc, _ = controllertest.Start(t, st, res, cfg)
	} else {
		if svc, err = controller.New(st, res, nil, cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	NewServer(svc, time.Minute, srvOpts...).Register(g)
	go g.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
	})
	return apiv1.NewControllerClient(conn), svc
}

func errorInfo(t *testing.T, err error) *errdetails.ErrorInfo {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
	return nil
}

func TestUnavailableWhileLoading(t *testing.T) {
	c, _ := serve(t, controller.Config{}, false)
	_, err := c.AcquireJobVNI(t.Context(), &apiv1.AcquireJobVNIRequest{Pod: &apiv1.PodRef{Namespace: "a", Name: "p"}, Node: "n1"})
	if status.Code(err) != codes.Unavailable || errorInfo(t, err).Reason != ReasonLoading {
		t.Fatalf("err = %v, want Unavailable/LOADING", err)
	}
	if _, err := c.ListVNIs(t.Context(), &apiv1.ListVNIsRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("ListVNIs err = %v", err)
	}
}

func TestAcquireReleaseAndErrors(t *testing.T) {
	c, _ := serve(t, controller.Config{VNIRange: vnialloc.Range{Min: 1024, Max: 1025}, PodVNIRange: vnialloc.Range{Min: 1025, Max: 1025}, PodVNISliceSize: 1}, true)
	ctx := t.Context()
	// Embedded mode with a pod range: pods take VNIs from node slices.
	l, err := c.AcquireJobVNI(ctx, &apiv1.AcquireJobVNIRequest{Pod: &apiv1.PodRef{Namespace: "a", Name: "p"}, Node: "n1"})
	if err != nil || !l.FromNodeSlice || l.Scope != apiv1.Scope_SCOPE_POD {
		t.Fatalf("acquire: %v %v", l, err)
	}
	s, err := c.AcquireSlices(ctx, &apiv1.AcquireSlicesRequest{Node: "n1", Pool: "pod-vni", Count: 1})
	if err != nil || len(s.Slices) != 1 || s.Slices[0].VniFirst != 1025 {
		t.Fatalf("slices: %v %v", s, err)
	}
	_, err = c.AcquireSlices(ctx, &apiv1.AcquireSlicesRequest{Node: "n2", Pool: "pod-vni", Count: 1})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("full pool: %v", err)
	}
	if ei := errorInfo(t, err); ei.Reason != ReasonRangeFull || ei.Metadata["resource"] != "pod-vni" || ei.Metadata["capacity"] != "1" {
		t.Fatalf("ErrorInfo = %v", ei)
	}
	_, err = c.AcquireJobVNI(ctx, &apiv1.AcquireJobVNIRequest{Pod: &apiv1.PodRef{Namespace: "BAD", Name: "p"}, Node: "n1"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad namespace: %v", err)
	}
	var br *errdetails.BadRequest
	for _, d := range status.Convert(err).Details() {
		if b, ok := d.(*errdetails.BadRequest); ok {
			br = b
		}
	}
	if br == nil || br.FieldViolations[0].Field != "pod.namespace" {
		t.Fatalf("BadRequest = %v", br)
	}
	r, err := c.RenewSlices(ctx, &apiv1.RenewSlicesRequest{Node: "n1", Usage: []*apiv1.SliceUsage{{Pool: "pod-vni", Index: 0, Allocated: 1}}})
	if err != nil || len(r.Held) != 1 || r.Held[0].Allocated != 1 || r.TtlMs != 60000 {
		t.Fatalf("renew: %v %v", r, err)
	}
	if _, err := c.ReleaseSlice(ctx, &apiv1.ReleaseSliceRequest{Node: "n2", Pool: "pod-vni", Index: 0}); status.Code(err) != codes.NotFound {
		t.Fatalf("release other's slice: %v", err)
	}
	ls, err := c.ListSlices(ctx, &apiv1.ListSlicesRequest{})
	if err != nil || len(ls.Pools) != 1 || ls.Pools[0].Leased != 1 {
		t.Fatalf("list slices: %v %v", ls, err)
	}
}

// A node's report of the VNIs it uses reaches the controller with its
// heartbeat: a hold on a VNI the report lacks is dropped by the next
// sweep (a pod lease with it), one the report names is kept.
func TestRenewReportsVNIsInUse(t *testing.T) {
	c, svc := serve(t, controller.Config{HoldGrace: time.Nanosecond, Quarantine: -1}, true)
	ctx := t.Context()
	kept, err := c.AcquireJobVNI(ctx, &apiv1.AcquireJobVNIRequest{Pod: &apiv1.PodRef{Namespace: "a", Name: "kept"}, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	lost, err := c.AcquireJobVNI(ctx, &apiv1.AcquireJobVNIRequest{Pod: &apiv1.PodRef{Namespace: "a", Name: "lost"}, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.RenewSlices(ctx, &apiv1.RenewSlicesRequest{Node: "n1", VnisReported: true, InUseVnis: []uint32{kept.Vni, 70000}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("report with VNI 70000: %v, want InvalidArgument", err)
	}
	if _, err := c.RenewSlices(ctx, &apiv1.RenewSlicesRequest{Node: "n1", VnisReported: true, InUseVnis: []uint32{kept.Vni}}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	ls, err := c.ListVNIs(ctx, &apiv1.ListVNIsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, l := range ls.GetLeases() {
		keys = append(keys, l.GetKey())
	}
	if len(keys) != 1 || keys[0] != kept.Key {
		t.Fatalf("leases after the sweep: %v, want only %s (and not %s)", keys, kept.Key, lost.Key)
	}
}

// AcquireJobVNIRequest.policy replaces the pod's annotation: a DRA claim
// names the scope of its pod's lease.
func TestAcquireJobVNIPolicy(t *testing.T) {
	jobs := controllertest.NewJobs()
	train := controllertest.Job("a", "train")
	jobs.Add("w-0", train)
	jobs.SetPolicy("a", "w-0", controller.Policy{Mode: controller.ModePod})
	jobs.End(store.Owner{Namespace: "a", Name: "missing"}) // the claim "missing" does not exist
	c, _ := serveWith(t, controller.Config{}, true, jobs, nil)
	tests := []struct {
		name      string
		policy    string
		scope     apiv1.Scope
		key       string
		code      codes.Code
		wantField string // of the BadRequest, for InvalidArgument
	}{
		{name: "empty keeps the annotation", scope: apiv1.Scope_SCOPE_POD, key: "pod/a/u-w-0"},
		{name: "job", policy: "job", scope: apiv1.Scope_SCOPE_JOB, key: "job/a/" + train.UID},
		{name: "pod", policy: "pod", scope: apiv1.Scope_SCOPE_POD, key: "pod/a/u-w-0"},
		{name: "none", policy: "none", scope: apiv1.Scope_SCOPE_NONE},
		{name: "existing claim", policy: "claim:shared", scope: apiv1.Scope_SCOPE_CLAIM, key: "claim/a/shared"},
		{name: "missing claim", policy: "claim:missing", code: codes.NotFound},
		{name: "malformed", policy: "claim:Shared!", code: codes.InvalidArgument, wantField: "policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := c.AcquireJobVNI(t.Context(), &apiv1.AcquireJobVNIRequest{
				Pod: &apiv1.PodRef{Namespace: "a", Name: "w-0", Uid: "u-w-0"}, Node: "n1", Policy: tt.policy})
			if status.Code(err) != tt.code {
				t.Fatalf("err = %v, want code %v", err, tt.code)
			}
			if tt.code != codes.OK {
				if tt.wantField != "" && badRequestField(err) != tt.wantField {
					t.Fatalf("BadRequest field = %q, want %q (err %v)", badRequestField(err), tt.wantField, err)
				}
				return
			}
			if l.GetScope() != tt.scope || l.GetKey() != tt.key || (l.GetVni() != 0) != (tt.scope != apiv1.Scope_SCOPE_NONE) {
				t.Fatalf("lease %v, want scope %v key %q", l, tt.scope, tt.key)
			}
		})
	}
}

// badRequestField returns the first field a status error's BadRequest
// names, "" if it has none.
func badRequestField(err error) string {
	for _, d := range status.Convert(err).Details() {
		if b, ok := d.(*errdetails.BadRequest); ok && len(b.FieldViolations) > 0 {
			return b.FieldViolations[0].Field
		}
	}
	return ""
}

type fixedAuth struct{ id auth.Identity }

func (f fixedAuth) Authenticate(context.Context) (auth.Identity, error) {
	if f.id.User == "" {
		return auth.Identity{}, auth.ErrUnauthenticated
	}
	return f.id, nil
}

func TestNodeBinding(t *testing.T) {
	c, _ := serve(t, controller.Config{}, true, grpc.UnaryInterceptor(auth.UnaryInterceptor(fixedAuth{auth.Identity{User: "agent", Node: "n1"}})))
	ctx := t.Context()
	if _, err := c.AcquireSlices(ctx, &apiv1.AcquireSlicesRequest{Node: "n2", Pool: "x", Count: 1}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("other node: %v", err)
	}
	if _, err := c.AcquireSlices(ctx, &apiv1.AcquireSlicesRequest{Node: "n1", Pool: "x", Count: 1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("own node, unknown pool: %v", err)
	}
	anon, _ := serve(t, controller.Config{}, true, grpc.UnaryInterceptor(auth.UnaryInterceptor(fixedAuth{})))
	if _, err := anon.ListVNIs(ctx, &apiv1.ListVNIsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("anonymous: %v", err)
	}
}

// Issue 15, item 8: every node-scoped call is bound to the node of the
// caller's identity. A call for another node, or by an identity that names
// no node at all, is refused with PermissionDenied and counted; only
// auth.AllowUnbound (the controller's --allow-unbound-agents) lets an
// identity without a node act for every node.
func TestIssue15Item8NodeBinding(t *testing.T) {
	calls := map[string]func(context.Context, apiv1.ControllerClient, string) error{
		"AcquireJobVNI": func(ctx context.Context, c apiv1.ControllerClient, node string) error {
			_, err := c.AcquireJobVNI(ctx, &apiv1.AcquireJobVNIRequest{Pod: &apiv1.PodRef{Namespace: "a", Name: "p"}, Node: node})
			return err
		},
		"ReleaseJobVNI": func(ctx context.Context, c apiv1.ControllerClient, node string) error {
			_, err := c.ReleaseJobVNI(ctx, &apiv1.ReleaseJobVNIRequest{Key: "a/p", Node: node})
			return err
		},
		"AcquireSlices": func(ctx context.Context, c apiv1.ControllerClient, node string) error {
			_, err := c.AcquireSlices(ctx, &apiv1.AcquireSlicesRequest{Node: node, Pool: "x", Count: 1})
			return err
		},
		"RenewSlices": func(ctx context.Context, c apiv1.ControllerClient, node string) error {
			_, err := c.RenewSlices(ctx, &apiv1.RenewSlicesRequest{Node: node})
			return err
		},
		"ReleaseSlice": func(ctx context.Context, c apiv1.ControllerClient, node string) error {
			_, err := c.ReleaseSlice(ctx, &apiv1.ReleaseSliceRequest{Node: node, Pool: "x"})
			return err
		},
	}
	bound := fixedAuth{auth.Identity{User: "agent", Node: "n1"}}
	unbound := fixedAuth{auth.Identity{User: "agent"}}
	tests := []struct {
		name   string
		authn  auth.Authenticator
		node   string
		reason string // ErrorInfo reason and metric label of a refusal; "" when allowed
		label  string
	}{
		{"bound, own node", bound, "n1", "", ""},
		{"bound, other node", bound, "n2", ReasonForbidden, "wrong_node"},
		{"bound, empty node", bound, "", ReasonForbidden, "wrong_node"},
		{"unbound", unbound, "n1", ReasonNoNode, "no_node"},
		{"unbound, empty node", unbound, "", ReasonNoNode, "no_node"},
		{"unbound, allowed for development", auth.AllowUnbound(unbound), "n2", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			c, _ := serveWith(t, controller.Config{}, true, nil, []Option{WithRegisterer(reg)}, grpc.UnaryInterceptor(auth.UnaryInterceptor(tt.authn)))
			for method, call := range calls {
				err := call(t.Context(), c, tt.node)
				if tt.reason == "" {
					if status.Code(err) == codes.PermissionDenied {
						t.Errorf("%s for %q: %v, want it allowed", method, tt.node, err)
					}
					continue
				}
				if status.Code(err) != codes.PermissionDenied || errorInfo(t, err).Reason != tt.reason {
					t.Errorf("%s for %q: %v, want PermissionDenied/%s", method, tt.node, err, tt.reason)
				}
			}
			for method := range calls {
				want := 0.0
				if tt.reason != "" {
					want = 1
				}
				if got := refused(t, reg, method, tt.label); got != want {
					t.Errorf("refusals of %s (%s) = %v, want %v", method, tt.label, got, want)
				}
			}
		})
	}
}

// refused reads slingshot_controller_grpc_node_refused_total{method,
// reason} from reg; 0 when absent.
func refused(t *testing.T, reg *prometheus.Registry, method, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "slingshot_controller_grpc_node_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method"] == method && labels["reason"] == reason {
				v = m.GetCounter().GetValue()
			}
		}
	}
	return v
}

func TestStatusMapping(t *testing.T) {
	tests := []struct {
		err  error
		code codes.Code
	}{
		{controller.ErrUnavailable, codes.Unavailable},
		{controller.ErrNotFound, codes.NotFound},
		{controller.ErrOwnerGone, codes.FailedPrecondition},
		{&controller.FieldError{Field: "f", Reason: "r"}, codes.InvalidArgument},
		{&controller.ExhaustedError{Resource: "vni", Err: errors.New("full")}, codes.ResourceExhausted},
		{fmt.Errorf("acquire: %w", &slices.TakenError{Pool: "hsn0", Index: 1, Node: "n"}), codes.AlreadyExists},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{errors.New("boom"), codes.Internal},
	}
	for _, tt := range tests {
		if got := status.Code(Status(tt.err)); got != tt.code {
			t.Errorf("Status(%v) code = %v, want %v", tt.err, got, tt.code)
		}
	}
}

func TestLeaseToProtoCollectives(t *testing.T) {
	c := &controller.Collectives{JobID: "k8s-u1", JobStepID: "0", Token: "tok", FabricMgrURL: "https://fm/fabric/collectives/multicasts",
		AddrsPerJob: 8, MinNodes: 2}
	got := leaseToProto(controller.Lease{Key: "job/ns/u1", VNI: 1500, Scope: store.ScopeJob, Collectives: c}).GetCollectives()
	want := &apiv1.HWCollectives{JobId: "k8s-u1", JobStepId: "0", McastToken: "tok", FabricMgrUrl: "https://fm/fabric/collectives/multicasts",
		AddrsPerJob: 8, MinNodes: 2}
	if !proto.Equal(got, want) {
		t.Fatalf("collectives %v, want %v", got, want)
	}
	if leaseToProto(controller.Lease{Key: "pod/ns/p", Scope: store.ScopePod}).GetCollectives() != nil {
		t.Fatal("a lease without collectives answered some")
	}
}
