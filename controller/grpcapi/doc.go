// Package grpcapi serves the controller's gRPC API ([apiv1.ControllerServer])
// over a [controller.Allocator]: it converts messages, binds authenticated
// agents to their own node, maps errors to status codes with details
// (ResourceExhausted for a full range, InvalidArgument with the field,
// Unavailable while loading, ...) and observes per-method latency.
//
// [NewLocalClient] calls a server in-process behind the generated client
// interface; the embedded mode of the controller client uses it.
package grpcapi
