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
// # Standby
//
// A full list of the store at 5,000 nodes and 20,000 leases (30,000
// objects, 33 MB of JSON) takes the API server 9-15 s on two shared cores,
// nearly all of it serving the pages; decoding is under 1 s. So every
// replica that may lead runs [Store.Follow]: it lists each record resource
// once and watches it from the list's revision (about 37 MiB of heap at
// that scale, managedFields dropped), relisting after a watch gap.
//
// A takeover then fences as before and reads the head, whose Applied
// names, for each record resource, the revision of the newest write made
// before the head's pending batch (each writer adds its writes'
// revisions, deletes included, to the next head it writes). A watch
// delivers one resource's events in revision order, so once the mirror of
// a resource has reached that revision it holds every write of every
// batch but the pending one. Load waits for that (at most
// Options.CatchUp), reads the pending batch's objects afresh where the
// mirror does not yet show them written, and rolls the batch forward as
// before; a resource whose revision is unknown (an old head; a delete
// made by a crashed writer and seen by nobody), or whose mirror does not
// catch up in time, is listed instead. The result is what a list after
// the fence would return. Fencing is unchanged: it is the head's
// compare-and-swap, not timing, that stops a deposed writer.
//
// A Store is safe for concurrent use; commits are serialized.
package kube
