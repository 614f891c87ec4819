// Package claimstatus writes each VNIClaim's VNI into the claim's status
// (status.vni, and status.message while the claim cannot get one), so
// that `kubectl get vniclaim` shows it without Metacontroller.
//
// [Writer] implements controller.ClaimObserver: the Allocator tells it of
// each claim's committed lease and of each load of the state (start, a
// takeover, a reload). It writes only what changed: it remembers what each
// claim's status says (read once with a GET where it does not know) and
// patches the status subresource (a JSON merge patch, with the
// controller's field manager) only when the lease says otherwise. A claim
// costs one GET and one patch when its lease is made, and nothing for the
// acquires and heartbeats of its nodes after that; a load costs one GET per
// claim lease and a patch for those that differ.
//
// A failed write never fails an acquire: it is retried with backoff, a
// bounded number of times, each failure counted in
// slingshot_controller_claim_status_calls_total{result="error"} and each
// claim given up on in slingshot_controller_claim_status_gave_up_total;
// the next acquire naming the claim, or the next load, tries again.
//
// Locks: the Allocator calls Forget and Loaded with its own lock held,
// so the Writer never holds its lock while it calls the Allocator.
package claimstatus
