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
// Metacontroller sends no credentials, so a body is a hint, confirmed
// with the API server (one metadata GET of the parent, never a cache)
// before a hook acts on it: /sync leases a VNI only for a parent that
// exists with the body's UID and is not being deleted, and takes the
// parent's annotations and owners from the API server, not from the body;
// /finalize marks an owner gone only when the parent is gone, has another
// UID now, or has a deletionTimestamp. A body the API server contradicts
// is answered HTTP 409 with the reason, changes nothing and is counted in
// slingshot_controller_hook_refused_total{hook,reason}. A controller
// without a Kubernetes API (--no-kube) cannot confirm anything and acts
// on every body: its hooks must then be unreachable to untrusted clients.
//
// While the controller loads its state, or the API server cannot be read,
// the hooks answer HTTP 429 with Retry-After, which Metacontroller
// honours; bad requests get 400. The hook endpoint is meant for
// Metacontroller only; the chart's NetworkPolicy admits only its
// namespace.
package hooks
