package controllerclient

import (
	"context"
	"errors"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

// answering is a controller that answers every AcquireJobVNI with one
// lease and records the keys released.
type answering struct {
	apiv1.UnimplementedControllerServer
	lease      *apiv1.JobVNILease
	releaseErr error

	mu       sync.Mutex
	released []string
}

func (a *answering) AcquireJobVNI(context.Context, *apiv1.AcquireJobVNIRequest) (*apiv1.JobVNILease, error) {
	return a.lease, nil
}

func (a *answering) ReleaseJobVNI(_ context.Context, in *apiv1.ReleaseJobVNIRequest) (*apiv1.JobVNILease, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.released = append(a.released, in.GetKey())
	if a.releaseErr != nil {
		return nil, a.releaseErr
	}
	return &apiv1.JobVNILease{Key: in.GetKey()}, nil
}

func (a *answering) releases() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.released)
}

// serve serves srv over gRPC on loopback until the test ends, the
// controller's version in its answers' header unless it is "", and
// returns a client of it.
func serve(t *testing.T, srv apiv1.ControllerServer, ctlVersion string) *Client {
	t.Helper()
	var opts []grpc.ServerOption
	if ctlVersion != "" {
		opts = append(opts, grpc.UnaryInterceptor(grpcapi.VersionHeader(ctlVersion)))
	}
	g := grpc.NewServer(opts...)
	apiv1.RegisterControllerServer(g, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	c, err := Dial(lis.Addr().String(), Options{Node: "n1", Retry: backoff.Policy{Attempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// An answer to AcquireJobVNI that this agent does not know (a scope
// that a later release may add, a VNI beyond 16 bits) is refused with
// an error naming both releases, never read as something else (the old
// reading took an unknown scope for none and cut the VNI to 16 bits), and
// the lease the controller granted is given back.
func TestAcquireRefusesAnswersItDoesNotKnow(t *testing.T) {
	const newer = "0.4.0"
	tests := []struct {
		name       string
		lease      *apiv1.JobVNILease
		ctlVersion string // "": the controller sends none
		releaseErr error
		// wantErr: the strings a refusal names; nil: read as want.
		wantErr      []string
		want         Lease
		wantReleased []string
	}{
		{name: "a later release's scope is refused, not read as none",
			lease: &apiv1.JobVNILease{Key: "node/a/x", Vni: 3000, Scope: apiv1.Scope(5)}, ctlVersion: newer,
			wantErr: []string{"scope 5", "agent " + version.Version, "controller " + newer}, wantReleased: []string{"node/a/x"}},
		{name: "a lease with no scope is refused, not read as none",
			lease: &apiv1.JobVNILease{Key: "job/a/u1", Vni: 3000}, ctlVersion: newer,
			wantErr: []string{"no scope", "agent " + version.Version, "controller " + newer}, wantReleased: []string{"job/a/u1"}},
		{name: "a VNI beyond 16 bits is refused, not cut to 16 bits",
			lease: &apiv1.JobVNILease{Key: "job/a/u1", Vni: math.MaxUint16 + 1 + 3000, Scope: apiv1.Scope_SCOPE_JOB}, ctlVersion: newer,
			wantErr: []string{"VNI 68536", "agent " + version.Version, "controller " + newer}, wantReleased: []string{"job/a/u1"}},
		{name: "the largest VNI on the wire is refused",
			lease: &apiv1.JobVNILease{Key: "claim/a/c", Vni: math.MaxUint32, Scope: apiv1.Scope_SCOPE_CLAIM}, ctlVersion: newer,
			wantErr: []string{"VNI 4294967295", "controller " + newer}, wantReleased: []string{"claim/a/c"}},
		{name: "a controller that says no version is named unknown",
			lease:   &apiv1.JobVNILease{Key: "node/a/x", Vni: 3000, Scope: apiv1.Scope(9)},
			wantErr: []string{"scope 9", "agent " + version.Version, "controller " + version.Unknown}, wantReleased: []string{"node/a/x"}},
		{name: "a controller two releases ahead is named outside the skew policy",
			lease: &apiv1.JobVNILease{Key: "node/a/x", Vni: 3000, Scope: apiv1.Scope(5)}, ctlVersion: "9.0.0",
			wantErr: []string{"controller 9.0.0", "outside the version-skew policy"}, wantReleased: []string{"node/a/x"}},
		{name: "a refused answer without a lease key releases nothing",
			lease: &apiv1.JobVNILease{Vni: 0, Scope: apiv1.Scope(7)}, ctlVersion: newer,
			wantErr: []string{"scope 7", "controller " + newer}},
		{name: "a failed release of a refused lease is told, and the refusal stays",
			lease: &apiv1.JobVNILease{Key: "node/a/x", Vni: 3000, Scope: apiv1.Scope(5)}, ctlVersion: newer,
			releaseErr: status.Error(codes.Internal, "disk full"),
			wantErr:    []string{"scope 5", "controller " + newer, "still held", "disk full"}, wantReleased: []string{"node/a/x"}},
		{name: "the largest VNI of a known scope is read",
			lease: &apiv1.JobVNILease{Key: "claim/a/c", Vni: math.MaxUint16, Scope: apiv1.Scope_SCOPE_CLAIM}, ctlVersion: newer,
			want: Lease{Key: "claim/a/c", VNI: math.MaxUint16, Scope: ScopeClaim}},
		{name: "an opted-out pod's lease is read",
			lease: &apiv1.JobVNILease{Scope: apiv1.Scope_SCOPE_NONE},
			want:  Lease{Scope: ScopeNone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &answering{lease: tt.lease, releaseErr: tt.releaseErr}
			c := serve(t, srv, tt.ctlVersion)
			got, err := c.AcquireJobVNI(t.Context(), PodRef{Namespace: "a", Name: "p", UID: "u1"})
			if tt.wantErr == nil {
				if err != nil || got != tt.want {
					t.Fatalf("AcquireJobVNI = %+v, %v; want %+v", got, err, tt.want)
				}
			} else {
				var ue *UnsupportedError
				if !errors.Is(err, ErrUnsupported) || !errors.As(err, &ue) {
					t.Fatalf("AcquireJobVNI = %+v, %v; want an error matching ErrUnsupported", got, err)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("the refusal %q does not say %q", err, s)
					}
				}
				if got != (Lease{}) {
					t.Errorf("a refusal returned the lease %+v", got)
				}
			}
			if r := srv.releases(); !slices.Equal(r, tt.wantReleased) {
				t.Errorf("released %q, want %q", r, tt.wantReleased)
			}
		})
	}
}

// A refusal gives the lease back even when the caller's context has
// ended meanwhile (a pod's start that timed out): else the node would
// hold at the controller a lease nothing of it will release.
func TestRefusedLeaseReleasedAfterCallersContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	api := &cancelling{lease: &apiv1.JobVNILease{Key: "node/a/x", Vni: 3000, Scope: apiv1.Scope(5)}, cancel: cancel}
	c, err := New(api, Options{Node: "n1", Retry: backoff.Policy{Attempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p", UID: "u1"}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("AcquireJobVNI: %v, want ErrUnsupported", err)
	}
	if !slices.Equal(api.released, []string{"node/a/x"}) {
		t.Errorf("released %q, want the refused lease", api.released)
	}
}

// cancelling is a controller in-process that ends its caller's context
// as it answers AcquireJobVNI, and records the keys released while its
// caller's context is live.
type cancelling struct {
	apiv1.ControllerClient
	lease    *apiv1.JobVNILease
	cancel   context.CancelFunc
	released []string
}

func (c *cancelling) AcquireJobVNI(context.Context, *apiv1.AcquireJobVNIRequest, ...grpc.CallOption) (*apiv1.JobVNILease, error) {
	c.cancel()
	return c.lease, nil
}

func (c *cancelling) ReleaseJobVNI(ctx context.Context, in *apiv1.ReleaseJobVNIRequest, _ ...grpc.CallOption) (*apiv1.JobVNILease, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	c.released = append(c.released, in.GetKey())
	return &apiv1.JobVNILease{Key: in.GetKey()}, nil
}

// older is an earlier controller: it serves heartbeats, and no
// ListSlices or AcquireSlices at all (gRPC answers them as methods it does
// not know).
type older struct {
	apiv1.UnimplementedControllerServer
}

func (older) RenewSlices(context.Context, *apiv1.RenewSlicesRequest) (*apiv1.RenewSlicesResponse, error) {
	return &apiv1.RenewSlicesResponse{}, nil
}

// serveOlder serves older over gRPC, its service without the methods
// lacked, its release in its answers' header (none for ""), and with
// handler (when set) answering what it does not serve.
func serveOlder(t *testing.T, ctlVersion string, handler grpc.StreamHandler, lacked ...string) *Client {
	t.Helper()
	var opts []grpc.ServerOption
	if ctlVersion != "" {
		opts = append(opts, grpc.UnaryInterceptor(grpcapi.VersionHeader(ctlVersion)))
	}
	if handler != nil {
		opts = append(opts, grpc.UnknownServiceHandler(handler))
	}
	g := grpc.NewServer(opts...)
	desc := apiv1.Controller_ServiceDesc
	desc.Methods = slices.DeleteFunc(slices.Clone(desc.Methods), func(m grpc.MethodDesc) bool { return slices.Contains(lacked, m.MethodName) })
	g.RegisterService(&desc, older{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	c, err := Dial(lis.Addr().String(), Options{Node: "n1", Retry: backoff.Policy{Attempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A call the controller does not serve (a method a later release added,
// asked of an earlier controller: how the version-skew policy adds what
// is not a field) is refused with an error naming the call and both
// releases, matching ErrUnsupported and keeping the controller's error.
// It named neither release before.
func TestCallTheControllerLacksNamesBothReleases(t *testing.T) {
	tests := []struct {
		name       string
		ctlVersion string // in the answers' header; "": none
		handler    grpc.StreamHandler
		heartbeat  bool // a heartbeat first, which the controller serves
		call       func(context.Context, *Client) error
		want       []string
	}{
		{name: "the controller's release from an earlier answer", ctlVersion: "0.3.0", heartbeat: true,
			call: func(ctx context.Context, c *Client) error { _, err := c.IPPools(ctx); return err },
			want: []string{"ListSlices", "does not serve", "agent " + version.Version, "controller 0.3.0"}},
		{name: "unknown before any answer said it", ctlVersion: "0.3.0",
			call: func(ctx context.Context, c *Client) error { _, err := c.AcquireIPSlices(ctx, "hsn", 1); return err },
			want: []string{"AcquireSlices", "does not serve", "agent " + version.Version, "controller " + version.Unknown}},
		{name: "a controller before 0.3.0, which never says it", heartbeat: true,
			call: func(ctx context.Context, c *Client) error { _, err := c.IPPools(ctx); return err },
			want: []string{"ListSlices", "agent " + version.Version, "controller " + version.Unknown}},
		{name: "a controller that refuses it naming both itself", ctlVersion: "0.3.0", handler: grpcapi.UnknownMethod("0.3.0"),
			call: func(ctx context.Context, c *Client) error { _, err := c.IPPools(ctx); return err },
			want: []string{"ListSlices", "agent " + version.Version, "controller 0.3.0", "(controller 0.3.0, agent " + version.Version + ")"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serveOlder(t, tt.ctlVersion, tt.handler, "ListSlices", "AcquireSlices")
			if tt.heartbeat {
				if err := c.Heartbeat(t.Context()); err != nil {
					t.Fatalf("heartbeat: %v", err)
				}
			}
			err := tt.call(t.Context(), c)
			var ce *Error
			if !errors.Is(err, ErrUnsupported) || !errors.As(err, &ce) || ce.Code != codes.Unimplemented {
				t.Fatalf("the call: %v; want ErrUnsupported over the controller's Unimplemented", err)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the refusal %q does not say %q", err, s)
				}
			}
		})
	}
}
