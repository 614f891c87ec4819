package draclaim

// The binding conditions of the driver's NIC devices, when the cluster
// has the agent publish them (dra.bindingConditions in the chart). The
// scheduler, having allocated a claim such a device, waits before it
// binds the pod to the node until the claim's status says
// ConditionVNILeased is true for the device, and gives the node up (the
// claim deallocated, the pod back in its queue) when it says
// ConditionVNILeaseFailed is true. The controller writes both: it has
// the VNI the agent leases at Prepare (package controller/bindcond).
const (
	// ConditionVNILeased: the claim's VNI is leased, held for the node
	// the claim is allocated on.
	ConditionVNILeased = "VNILeased"
	// ConditionVNILeaseFailed: the claim cannot have its VNI on that
	// node; its reason says why (LeaseRefused, NodeAgentUnreachable,
	// InvalidConfig, ControllerUnavailable).
	ConditionVNILeaseFailed = "VNILeaseFailed"
)
