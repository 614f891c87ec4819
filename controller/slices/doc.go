// Package slices carves a cluster-wide range, a VNI sub-range or an IP
// prefix, into fixed-size node slices and keeps which node leases which
// slice.
//
// This is the whereabouts node-slice idea with the lessons of Calico,
// Cilium and Kuryr: a node leases whole slices and allocates from them
// locally; a slice lease has a TTL that the node's heartbeats renew; a
// full pool is an error that says so; a pool's range cannot change while
// any slice of it is leased. New slices are chosen next-fit, so a slice
// just given back is not handed out at once; a node may also lease one
// named slice ([Table.AcquireAt]), as for a fixed address outside its
// other slices, which is then unique cluster-wide by construction.
//
// # Reclaim
//
// A node reports per slice how many ids it has allocated and whether the
// slice is open: whether it allocates from it without further report. A
// slice is leased open, and the node reports it closed only once it has
// stopped allocating from it. Since a node can hand out an id after its
// last heartbeat and then go down, its last report may be short of the
// truth for an open slice. So a slice is reclaimed only after its node is
// gone plus a grace period, and then:
//
//   - when only its lease expired (the node is silent): if the node last
//     reported it closed with nothing allocated; otherwise it is kept
//     (stranded) for as long as the node stays silent, and the node's next
//     heartbeat renews it;
//   - when its Node object has been deleted: if the node last reported
//     nothing allocated, open or not, as the pods of a deleted node are
//     deleted with it.
//
// A Table is in-memory state and is not safe for concurrent use; the
// controller serialises access and persists the ops it returns.
package slices
