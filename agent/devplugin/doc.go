// Package devplugin is the agent's device-plugin front end: it serves the
// node's NICs (hpe.com/cxi, shared sharesPerNIC times) and the GPU machine
// type's units to the kubelet through the device-plugin API v1beta1, and
// translates the kubelet's calls into the bind engine's (package engine).
//
//   - Allocate (nicresource.go, units.go) makes no network call and writes
//     nothing: device nodes, the environment already known, the
//     per-allocation directory and the CDI device.
//   - PreStartContainer (binder.go) finds the pod from its devices
//     (package podwatch), has the engine admit it (lease and record),
//     make and bind its services to the pod's network namespace, puts its
//     hsn interface in place (hsn.go), and publishes the late-bound
//     environment (allocfiles.go).
//   - A pod gone from the kubelet (cleanup.go) is torn down by the engine,
//     and at start (reconcile.go) the engine revives the live pods and
//     destroys the orphans.
//
// It creates, binds and destroys no CXI service itself: only the engine
// does, the same for pods and for DRA's claims (package dra). The agent's
// root (package agent) builds it with New and runs it as its front end
// when --api=deviceplugin.
package devplugin
