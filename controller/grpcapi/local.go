package grpcapi

import (
	"context"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"google.golang.org/grpc"
)

// localClient calls a ControllerServer in-process.
type localClient struct{ s apiv1.ControllerServer }

// NewLocalClient returns a client that calls s directly, with no network
// and no authentication (call options are ignored).
func NewLocalClient(s apiv1.ControllerServer) apiv1.ControllerClient { return localClient{s: s} }

func (c localClient) AcquireJobVNI(ctx context.Context, in *apiv1.AcquireJobVNIRequest, _ ...grpc.CallOption) (*apiv1.JobVNILease, error) {
	return c.s.AcquireJobVNI(ctx, in)
}

func (c localClient) ReleaseJobVNI(ctx context.Context, in *apiv1.ReleaseJobVNIRequest, _ ...grpc.CallOption) (*apiv1.JobVNILease, error) {
	return c.s.ReleaseJobVNI(ctx, in)
}

func (c localClient) AcquireSlices(ctx context.Context, in *apiv1.AcquireSlicesRequest, _ ...grpc.CallOption) (*apiv1.NodeSlices, error) {
	return c.s.AcquireSlices(ctx, in)
}

func (c localClient) RenewSlices(ctx context.Context, in *apiv1.RenewSlicesRequest, _ ...grpc.CallOption) (*apiv1.RenewSlicesResponse, error) {
	return c.s.RenewSlices(ctx, in)
}

func (c localClient) ReleaseSlice(ctx context.Context, in *apiv1.ReleaseSliceRequest, _ ...grpc.CallOption) (*apiv1.ReleaseSliceResponse, error) {
	return c.s.ReleaseSlice(ctx, in)
}

func (c localClient) ListVNIs(ctx context.Context, in *apiv1.ListVNIsRequest, _ ...grpc.CallOption) (*apiv1.ListVNIsResponse, error) {
	return c.s.ListVNIs(ctx, in)
}

func (c localClient) ListSlices(ctx context.Context, in *apiv1.ListSlicesRequest, _ ...grpc.CallOption) (*apiv1.ListSlicesResponse, error) {
	return c.s.ListSlices(ctx, in)
}
