//go:build compat_baseline

// The baseline's (0.2.0) side of what the agent's controller client and
// the controller say of their releases: its controller names none, and
// its client refuses no answer it does not know (it reads an unknown
// scope as none and cuts a VNI to 16 bits) and names no release when the
// controller does not serve a call.

package main

import "google.golang.org/grpc"

const controllerHeader = ""

func unsupported(error) bool { return false }

// serverOptions: the baseline's controller answers a method it does not
// serve as gRPC does, naming neither release.
func serverOptions() []grpc.ServerOption { return nil }
