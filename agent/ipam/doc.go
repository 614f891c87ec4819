// Package ipam gives pods addresses on the high-speed network from the
// node's slices of the controller's IP pools, with no call to the
// controller or the API server on the pod's path: the slices are leased
// ahead of need (the Kuryr lesson: pools ready before pods ask).
//
// An allocation is keyed by its owner (a CNI attachment, container ID and
// interface, or a pod's hsn interface), is idempotent, and is written to
// the state file before it is handed out, so that a restart of the agent
// neither hands an address out twice nor loses one. The heartbeat reports
// each slice's allocations and that the node allocates from it, so that
// the controller never reclaims a slice with live addresses, even while
// the node is silent.
//
// A pod may ask for a pool, a subnet or a fixed address (package netreq);
// a fixed address outside the node's slices is reserved cluster-wide by
// leasing the slice that holds it.
package ipam
