// Package agent is the Slingshot node agent: it discovers the node's NICs,
// serves them to the kubelet as a device-plugin resource, programs a CXI
// service per pod and NIC before the pod's code runs (the pod's network
// namespace as member, the job's VNI, the allowed traffic classes), removes
// them when the pod exits, and reconciles the driver with its checkpoint
// after a restart.
//
// This package only wires the parts and serves HTTP: it opens the NICs'
// drivers, makes the one bind engine (package engine) over them and the
// checkpoint, and one front end over the engine, as --api says: the
// device plugin (package devplugin) or DRA (package dra, wired in
// dramode.go). Neither front end creates, binds or destroys a CXI service
// itself; the engine does, for pods and claims alike. Beside them it runs
// what both modes share: the controller link, the node's IPAM, the NICs'
// health, the default-service guard, the drain of stuck services, and
// the metrics, health and inspect endpoint.
//
// [Run] wires the parts and owns every goroutine; cmd/slingshot-agent only
// parses flags.
package agent
