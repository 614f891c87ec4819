// Package kube is the controller's store on the Kubernetes API, for two or
// more replicas with leader election (package
// [github.com/slingshot-k8s/slingshot/controller/leader]). It implements
// [store.Store] with small custom resources in the controller's namespace,
// never one object that grows with the cluster:
//
//   - VNILease, one per VNI lease, named vni-<owner-uid> (claims and
//     leases without a UID get a name derived from their key); its status
//     lists the nodes that hold the VNI.
//   - NodeSlice, one per leased node slice, named <pool>-<index>.
//   - VNIQuarantine, one per freed VNI waiting for reuse, named vni-<n>.
//   - StoreJournal, one per store (the "head"): the fencing epoch, the
//     store's small meta values (configured ranges, the next-fit cursor)
//     and the batch being applied.
//
// The custom resource definitions are in crds/ (embedded as [CRDs]).
//
// # Commits
//
// The API server has no multi-object transactions, so a batch is made
// atomic with a redo journal and safe against a second writer with a
// fence:
//
//  1. The batch is checked against the store's cache of versions (every
//     record carries the store version in an annotation), and chained ops
//     on one record are folded into one write. A stale version, or a lease
//     whose VNI another lease holds, fails here with [store.ErrConflict]
//     and nothing is written.
//  2. The head is updated compare-and-swap on its resourceVersion with the
//     batch's writes and meta changes. This is the commit point: once it
//     is written, the batch will be applied in full (by this writer now,
//     or by the next Load).
//  3. The writes are applied in parallel, each compare-and-swap on the
//     object's resourceVersion (create for a new record, update or
//     delete with a resourceVersion precondition otherwise).
//
// Load fences first: it rewrites the head with a new epoch, so a writer
// that still believes it leads (a paused or partitioned old leader) fails
// at step 2 of its next batch with an error wrapping [ErrFenced] (and
// store.ErrConflict) before it writes any record. Load then lists every
// object and rolls the previous head's batch forward, so what it returns
// contains every batch that reached its commit point and no part of any
// other. Leader election keeps two replicas from fencing each other in
// turn; the fence keeps a lease from being handed out twice even when
// election timing fails (clock jumps, long pauses).
//
// A Commit that fails after its commit point returns an error, yet the
// next Load completes the batch: as with any remote store, an error can
// mean the outcome is unknown, never that part of the batch applied. After
// such a failure the store refuses further commits until it is loaded
// again, which the controller does whenever a commit fails.
//
// A Store is safe for concurrent use; commits are serialized.
package kube
