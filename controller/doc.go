// Package controller is the thin cluster controller's core: job VNI
// leases, node slices, the startup gate and group commit to a [store.Store].
//
// # Promises
//
// A VNI is never handed to two unrelated jobs, it belongs to its job for
// the job's whole life, and it is recycled after the job ends. Concretely:
//
//   - A lease is keyed by the pod's controlling owner (namespace and UID),
//     found by a [Resolver] that walks owner references through a
//     configured list of kinds. A pod with no such owner gets a pod-scoped
//     VNI. With no Kubernetes API (embedded mode) every pod is pod-scoped.
//   - Acquire is idempotent and records which nodes hold the VNI; release
//     is per node. A VNI is freed only when its owner is gone and no node
//     holds it, then kept in quarantine (default 60 s) before reuse; the
//     allocator is next-fit as well, so a freed VNI is the last candidate.
//   - Every change is durable before the reply: requests that change state
//     wait for the batch that carries their change to commit. Concurrent
//     requests share one transaction (group commit), so one fsync
//     acknowledges many.
//   - No request is answered before all state is loaded: until then, and
//     while state is reloaded after a failed commit, calls return errors
//     wrapping [ErrUnavailable].
//   - A configured range that no longer covers a live lease (a shrunk VNI
//     range, a changed pool) is refused at load with an error that names
//     the lease.
//
// # Scopes and the annotation
//
// The annotation [AnnotationVNI] on the pod (first) or its owner chooses:
// "none" (no VNI), "job" (default: one VNI per controlling owner), "pod"
// (one VNI for this pod alone) or "claim:NAME" (the VNI of the VNIClaim
// NAME in the same namespace, shared on purpose by every job that names
// it; the claim must exist, and is freed when it is deleted and no node
// holds it). A claim is namespaced, so only workloads of its namespace can
// join it. A request may name the scope itself, in the same grammar, as a
// DRA ResourceClaim's config does ([Allocator.AcquireJobVNIWithPolicy],
// AcquireJobVNIRequest.policy on the wire): it then replaces the
// annotation's choice, and the rest is as above.
//
// Pod-scoped VNIs come from the nodes' slices of the pod VNI sub-range when
// one is configured (the answer then says [Lease.FromNodeSlice] and the
// node picks a VNI locally), otherwise from the main range.
//
// The annotation [AnnotationNetwork] on the pod (only) is the pod's
// network request: the HSN IP pool, netdev, subnet or address it wants.
// The controller passes it through unparsed in every AcquireJobVNI answer
// ([Lease.NetworkRequest]) and never stores it: the node checks it
// against its IP pools.
//
// # Node slices
//
// A node leases whole slices of a pool (the pod VNI sub-range, or an IP
// prefix) and allocates from them with no further call; it may also lease
// one named slice ([Allocator.AcquireSliceAt]), as for a fixed address
// outside its other slices, which another node then cannot lease. Its
// heartbeat ([Allocator.RenewSlices]) renews every lease it holds and
// reports, per slice, the ids allocated and whether the slice is open
// (the node allocates from it without further report; a slice is leased
// open). The sweep reclaims a slice after its node is gone plus
// Config.SliceGrace: a node that is only silent (its leases expired)
// keeps every slice it last reported open or with ids allocated, for as
// long as it stays silent, since it may have handed out an id after its
// last report; a node whose Node object is deleted keeps only those with
// ids allocated, since its pods are deleted with it. See package slices.
//
// A heartbeat that changes nothing costs nothing: the leader renews in
// memory and answers at once. It writes (and waits for the write before
// it answers) only a slice taken or given back and a report that changes
// what reclaim reads: whether anything is allocated, and whether the
// slice is open. A new leader cannot know the last renewals, so it counts
// every slice renewed at its takeover (slices.Table.Load) and reclaims a
// silent node's slice no sooner than Config.SliceTTL plus SliceGrace
// after it. The store's load grows with change, not with time or with
// the number of quiet nodes.
//
// A Allocator is safe for concurrent use. [Allocator.Run] owns its goroutines
// (the committer and the sweeper) and returns when its context ends.
package controller
