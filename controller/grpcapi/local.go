package grpcapi

import (
	"context"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/internal/version"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// localClient calls a ControllerServer in-process.
type localClient struct{ s apiv1.ControllerServer }

// NewLocalClient returns a client that calls s directly, with no network
// and no authentication. Call options are ignored but for grpc.Header,
// which gets the controller's version as over the network
// ([VersionHeader]): the controller in-process is this binary's release.
func NewLocalClient(s apiv1.ControllerServer) apiv1.ControllerClient { return localClient{s: s} }

// header answers the call's grpc.Header options.
func header(opts []grpc.CallOption) {
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok && h.HeaderAddr != nil {
			*h.HeaderAddr = metadata.Pairs(version.ControllerHeader, version.Version)
		}
	}
}

func (c localClient) AcquireJobVNI(ctx context.Context, in *apiv1.AcquireJobVNIRequest, opts ...grpc.CallOption) (*apiv1.JobVNILease, error) {
	header(opts)
	return c.s.AcquireJobVNI(ctx, in)
}

func (c localClient) ReleaseJobVNI(ctx context.Context, in *apiv1.ReleaseJobVNIRequest, opts ...grpc.CallOption) (*apiv1.JobVNILease, error) {
	header(opts)
	return c.s.ReleaseJobVNI(ctx, in)
}

func (c localClient) AcquireSlices(ctx context.Context, in *apiv1.AcquireSlicesRequest, opts ...grpc.CallOption) (*apiv1.NodeSlices, error) {
	header(opts)
	return c.s.AcquireSlices(ctx, in)
}

func (c localClient) RenewSlices(ctx context.Context, in *apiv1.RenewSlicesRequest, opts ...grpc.CallOption) (*apiv1.RenewSlicesResponse, error) {
	header(opts)
	return c.s.RenewSlices(ctx, in)
}

func (c localClient) ReleaseSlice(ctx context.Context, in *apiv1.ReleaseSliceRequest, opts ...grpc.CallOption) (*apiv1.ReleaseSliceResponse, error) {
	header(opts)
	return c.s.ReleaseSlice(ctx, in)
}

func (c localClient) ListVNIs(ctx context.Context, in *apiv1.ListVNIsRequest, opts ...grpc.CallOption) (*apiv1.ListVNIsResponse, error) {
	header(opts)
	return c.s.ListVNIs(ctx, in)
}

func (c localClient) ListSlices(ctx context.Context, in *apiv1.ListSlicesRequest, opts ...grpc.CallOption) (*apiv1.ListSlicesResponse, error) {
	header(opts)
	return c.s.ListSlices(ctx, in)
}
