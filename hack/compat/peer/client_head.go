//go:build !compat_baseline

// HEAD's side of what the agent's controller client and the controller
// say of their releases; the baseline's is in client_baseline.go.

package main

import (
	"errors"

	"google.golang.org/grpc"

	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

// controllerHeader is the header in which the controller names its
// release (from 0.3.0).
const controllerHeader = version.ControllerHeader

// unsupported reports whether err is the client's refusal of an answer it
// does not know (from 0.3.0).
func unsupported(err error) bool { return errors.Is(err, controllerclient.ErrUnsupported) }

// serverOptions are those of the controller's gRPC server
// (cmd/slingshot-controller) that concern releases: its version on every
// answer, and its refusal of a method it does not serve naming both
// releases.
func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.UnaryInterceptor(grpcapi.VersionHeader(version.Version)),
		grpc.UnknownServiceHandler(grpcapi.UnknownMethod(version.Version))}
}
