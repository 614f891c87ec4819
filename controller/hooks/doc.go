// Package hooks serves the Metacontroller DecoratorController hooks /sync
// and /finalize for the controller's VNI leases.
//
// The DecoratorController selects job-like parents (see deploy/) and
// attaches to each one a VNI object of this project's API group:
//
//	apiVersion: slingshot.hpe.com/v1alpha1
//	kind: VNI
//	metadata: {name: vni-<owner-uid>, namespace: <owner namespace>}
//	spec: {vni: 1234, scope: job, leaseKey: job/<ns>/<uid>, owner: {...}}
//
// /sync leases the owner's VNI (idempotent) and returns that attachment
// plus the annotation slingshot.hpe.com/assigned-vni on the parent. An
// object that is itself controlled by a followed kind (a ReplicaSet of a
// Deployment) gets nothing: its top owner holds the VNI. A parent
// annotated "none" or "pod" gets nothing either, and "claim:NAME" gets the
// claim's VNI. A malformed annotation or a full range is reported on the
// parent as the annotation slingshot.hpe.com/vni-error (HTTP 200, so
// Metacontroller applies it), the latter with resyncAfterSeconds.
//
// /finalize, on deletion, marks the owner gone and answers finalized:true
// only once the VNI is released, no node holds it and no VNI attachment is
// observed any more; until then it keeps the attachment (while nodes hold
// the VNI) and asks to be called again with resyncAfterSeconds. When the
// parent merely stopped matching the selectors (no deletionTimestamp) the
// VNI stays with its pods and finalize answers finalized:true. Both hooks
// are idempotent.
//
// While the controller loads its state the hooks answer HTTP 429 with
// Retry-After, which Metacontroller honours; bad requests get 400. The
// hook endpoint is meant for Metacontroller only; restrict it with a
// NetworkPolicy (Metacontroller sends no credentials).
package hooks
