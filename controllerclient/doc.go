// Package controllerclient is the node agent's side of the controller:
// job VNI leases with bounded retries, the node's warm pool of pod-scoped
// VNIs and slice heartbeats. It is a client of the controller's wire API
// (controller/api/v1) only: it links neither the controller nor a store.
//
// # Use
//
//	c, err := controllerclient.Dial("controller.slingshot:9440", controllerclient.Options{
//		Node: nodeName, TokenFile: "/var/run/secrets/slingshot/token", TLS: tlsConfig})
//	// or, for a controller in-process: c, err := controllerclient.New(ec.API(), opts)
//	defer c.Close()
//	c.RestorePodVNIs(vnisFromCheckpoint) // before Run: what running pods use
//	go c.Run(ctx)                        // heartbeats and pool refills; must run
//
//	lease, err := c.AcquireJobVNI(ctx, controllerclient.PodRef{Namespace: ns, Name: name, UID: uid})
//	// lease.VNI is the VNI to program (0 when lease.Scope is ScopeNone);
//	// keep the Lease in the checkpoint, it is plain JSON-able data.
//	err = c.ReleaseJobVNI(ctx, lease) // at pod exit on this node
//
//	v, err := c.PodVNI(ctx) // a pod-scoped VNI from the local pool, no network call
//	c.ReturnPodVNI(v)
//
// AcquireJobVNI asks the controller, which resolves the pod's controlling
// owner; when the answer is a pod-scoped VNI from the node's slice, it is
// taken from the local pool and [Lease.Local] is set, so ReleaseJobVNI
// returns it locally. [Client.PodVNI] never makes a network call: Run keeps
// the pool filled ahead of need (the Kuryr port-pool idea: refill when
// fewer than LowWater VNIs are free, give back whole idle slices above
// twice that). When the pool is empty PodVNI waits for Run's refill until
// ctx ends.
//
// # Failure handling
//
// Every call has a per-attempt timeout and is retried with backoff
// (internal/backoff) on Unavailable, DeadlineExceeded and Aborted, a
// bounded number of times; other codes are returned at once as errors
// wrapping the sentinels below (ErrExhausted for a full range, ...). The
// gRPC connection reconnects by itself. Heartbeats report how many VNIs
// are in use per slice, so the controller never reclaims a slice in use.
//
// A slice given back is taken out of the pool, in one step with the check
// that none of its VNIs is in use, before ReleaseSlice is sent, so no
// PodVNI can hand out a VNI of it meanwhile. When the answer leaves it
// unknown whether the controller released it (a timeout, a failed commit,
// a retry after either), its VNIs stay out of the pool and the release is
// retried at the next heartbeat until the controller says it no longer
// leases the slice; only a refusal before acting (a bad argument or
// credential on the one attempt made) puts them back.
//
// # In-process controller
//
// [New] takes any [apiv1.ControllerClient]. The agent's embedded mode
// (--controller=embedded) passes the API of a controller it runs
// in-process (package controller/embedded), which its main links only in
// binaries built with the embedded_controller tag; that controller's Run
// and Close are its owner's, not the client's.
//
// A Client is safe for concurrent use. Run owns the client's background
// work and returns when its context ends; Close releases Dial's
// connection after Run has returned.
package controllerclient
