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
// join it.
//
// Pod-scoped VNIs come from the nodes' slices of the pod VNI sub-range when
// one is configured (the answer then says [Lease.FromNodeSlice] and the
// node picks a VNI locally), otherwise from the main range.
//
// A Allocator is safe for concurrent use. [Allocator.Run] owns its goroutines
// (the committer and the sweeper) and returns when its context ends.
package controller
