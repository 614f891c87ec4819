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
//	// IP slices for the high-speed network, kept by the agent's IPAM:
//	c.SetSliceHolder(ipam)                         // before Run: its reports ride the heartbeats
//	pools, err := c.IPPools(ctx)                   // the controller's IP pools
//	held, err := c.AcquireIPSlices(ctx, "hsn0", 2) // at least 2 slices; all held in hsn0
//	held, err = c.AcquireIPSliceAt(ctx, "hsn0", 7) // *SliceTakenError if another node holds it
//	err = c.ReleaseIPSlice(ctx, "hsn0", 7)         // nil, ErrReleaseRefused, or unknown
//
// AcquireJobVNI asks the controller, which resolves the pod's controlling
// owner (and takes the scope from [PodRef.Policy] instead of the pod's
// annotation when it is set); when the answer is a pod-scoped VNI from the node's slice, it is
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
// gRPC connection reconnects by itself, at most about 3 s apart (with
// jitter), however long the controller was away. Heartbeats report how many VNIs
// are in use per slice, so the controller never reclaims a slice in use,
// and whether the node hands out from the slice without further report
// (open): the controller keeps an open slice of a node that is only silent,
// since the node may have handed out a VNI or address after its last
// heartbeat. A slice is leased open; the pod VNI pool reports a slice
// closed while giving it back, and hands out from it again, after a
// refused give-back, only once a heartbeat has reported it open again.
//
// # IP slices
//
// The client leases slices of the controller's IP pools for a
// [SliceHolder] (the agent's IPAM), which allocates addresses from them.
// Each heartbeat carries the holder's [SliceReport]s and hands it the
// answer: every IP slice the node holds, and its reported slices the
// controller does not lease it (lost). An answer that an IP slice acquire
// or release may have overtaken (one that ended after the heartbeat asked
// for the reports) is not handed on; the next one is. A release still in
// flight while an answer is handed on may not be reflected in it, so the
// holder keeps a slice it is giving back from being taken up again, as the
// pod VNI pool does.
// [Client.ReleaseIPSlice] tells a release that certainly did not happen
// (ErrReleaseRefused) from one whose outcome is unknown, as the pod VNI
// pool's give-back does.
//
// A slice given back is taken out of the pool, in one step with the check
// that none of its VNIs is in use, before ReleaseSlice is sent, so no
// PodVNI can hand out a VNI of it meanwhile. When the answer leaves it
// unknown whether the controller released it (a timeout, a failed commit,
// a retry after either), its VNIs stay out of the pool and the release is
// retried at the next heartbeat until the controller says it no longer
// leases the slice; only a refusal before acting (a bad argument or
// credential on the one attempt made) puts them back, once a heartbeat has
// reported the slice open again.
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
