// Package apiv1 is the controller's gRPC API for node agents
// (controller.proto) and its generated code. Regenerate with
// `make generate`.
package apiv1
