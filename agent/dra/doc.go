// Package dra serves the node's Slingshot NICs
// through Dynamic Resource Allocation (resource.k8s.io/v1), beside the
// device-plugin front end of package agent and over the same core: CXI
// services, VNI leases and CDI specs.
//
// The kubelet prepares a claim before the pod's sandbox exists, so no
// network namespace is known then. Prepare therefore leases the claim's
// VNI, creates its services disabled and admitting nobody, and writes the
// claim's CDI spec, which is complete from then on. The agent is also an
// NRI plugin of the container runtime: when the pod's sandbox runs it
// admits the sandbox's network namespace to the services and enables
// them, and it refuses to create a container of a pod whose services are
// not bound to that pod's current namespace (fail closed). A sandbox made
// again with a new namespace gets new services on the same VNI: the
// driver can add a member to a service but never remove one, and the old
// namespace's inode may pass to another pod's namespace. Unprepare
// destroys the services and releases the VNI.
//
// The Manager is a front end over the one bind engine (agent/engine): lease
// holds, namespace holds, binding and checking services and the
// environment are the engine's, shared with the device plugin's path.
// Every step is recorded in the agent's one checkpoint (agent/checkpoint,
// beside the device plugin's pods) before and after it acts, so a retried
// or repeated call finds what was done, and a restarted agent keeps the
// services of prepared claims and holds their namespaces again.
//
// It fails closed: without an NRI connection Prepare is refused and the
// agent is not ready; a bind that fails part-way leaves no service
// admitting the pod; a second pod on a claim is refused at its sandbox
// (when the kubelet told the agent of it) or at its containers (which
// carry the claim's marker from the CDI spec); a claim the kubelet forgot
// is unprepared once the API server proves, twice, that it is no longer
// allocated to the node.
package dra
