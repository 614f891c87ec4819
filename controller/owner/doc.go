// Package owner answers the controller's questions to the Kubernetes API:
// which controlling owner a pod belongs to, whether an owner still exists,
// and since when a Node is gone.
//
// [Resolver] walks a pod's controller owner references through a
// configured list of kinds ([DefaultKinds]: ReplicaSet and Deployment,
// StatefulSet, Job, JobSet, MPIJob, Volcano Job, LeaderWorkerSet) and keys
// the pod by the topmost listed owner, so that every pod of a Deployment
// (through its ReplicaSets) or a JobSet (through its Jobs) shares one VNI.
// It reads only object metadata (the metadata client), so custom kinds
// need no typed client. A pod whose chain reaches no listed kind is
// pod-scoped. The pod's own AnnotationVNI wins over its owners'. The pod's
// AnnotationNetwork (its network request) is passed on as it is. A gang
// start costs one read per pod: the pod is read from the API server's
// watch cache by its UID, and each owner once for all its pods (cached by
// UID for [DefaultOwnerTTL], concurrent reads shared); see [Resolver] for
// why a watch-cache read is safe there.
//
// [NodeWatcher] follows Node objects with an informer and reports when a
// node was deleted, or was missing when the informer first synced.
package owner
