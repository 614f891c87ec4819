package grpcapi

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// serve runs svc behind a real gRPC server on loopback and returns a
// client; run says whether to start the service (false keeps it loading).
func serve(t testing.TB, cfg controller.Config, run bool, opts ...grpc.ServerOption) (apiv1.ControllerClient, *controller.Service) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	var svc *controller.Service
	if run {
		svc, _ = controllertest.Start(t, st, nil, cfg)
	} else {
		if svc, err = controller.New(st, nil, nil, cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	NewServer(svc, time.Minute).Register(g)
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
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{errors.New("boom"), codes.Internal},
	}
	for _, tt := range tests {
		if got := status.Code(Status(tt.err)); got != tt.code {
			t.Errorf("Status(%v) code = %v, want %v", tt.err, got, tt.code)
		}
	}
}
