// Package slices carves a cluster-wide range, a VNI sub-range or an IP
// prefix, into fixed-size node slices and keeps which node leases which
// slice.
//
// This is the whereabouts node-slice idea with the lessons of Calico,
// Cilium and Kuryr: a node leases whole slices and allocates from them
// locally; a slice lease has a TTL that the node's heartbeats renew; a
// slice is reclaimed only after its node is gone (lease expired or Node
// object deleted) plus a grace period, and only when the node last reported
// nothing allocated from it; a full pool is an error that says so; a pool's
// range cannot change while any slice of it is leased. New slices are
// chosen next-fit, so a slice just given back is not handed out at once.
//
// A Table is in-memory state and is not safe for concurrent use; the
// controller serialises access and persists the ops it returns.
package slices
