// Package agent is the Slingshot node agent: it discovers the node's NICs,
// serves them to the kubelet as a device-plugin resource, programs a CXI
// service per pod and NIC before the pod's code runs (the pod's network
// namespace as member, the job's VNI, the allowed traffic classes), removes
// them when the pod exits, and reconciles the driver with its checkpoint
// after a restart.
//
// The pod path is the design's (DESIGN.md, "The pod path"): Allocate makes
// no network call and writes nothing; PreStartContainer finds the pod
// from the kubelet's device checkpoint and PodResources, leases its VNI,
// creates the services, records them and publishes SLINGSHOT_VNIS and
// SLINGSHOT_SVC_IDS through a CDI spec and a per-container file; a pod is
// gone only when PodResources and the kubelet's device checkpoint both no
// longer name it (see package podwatch).
//
// [Run] wires the parts and owns every goroutine; cmd/slingshot-agent only
// parses flags.
package agent
