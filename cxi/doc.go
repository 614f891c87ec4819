// Package cxi is the node agent's view of HPE Slingshot NICs. This part of
// it manages CXI services: the driver objects that decide which processes
// (by uid, gid or network namespace) may use a NIC, on which VNIs and
// traffic classes, and with which resources.
//
// A [Client] creates, lists, reads and destroys services through a
// [Device]: a *uapi.Device over /dev/cxiN on real hardware, or over the
// simulated driver of package cxi/sim elsewhere. It validates every
// [ServiceSpec] before the driver sees it (errors wrap [ErrInvalidSpec]),
// never creates a service with open membership, admits a pod's network
// namespace with the driver's disable / SVC_SET_NETNS / enable sequence
// (destroying the service again if a step fails), retries SVC_DESTROY
// while the service is busy with a bounded backoff, and turns driver
// errnos into the sentinels [ErrNoResources] (with the driver's fail info
// in an [*AllocError]), [ErrBusy], [ErrNotFound] and [ErrDefaultService].
// The underlying syscall.Errno stays in the chain, so errors.Is(err,
// unix.EPERM) works too.
//
// Services outlive the processes that create them (the driver does not tie
// them to the file descriptor), so a restarted agent lists them and
// destroys the ones it no longer needs.
package cxi
