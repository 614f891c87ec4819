// Package engine is a holder's whole life on the node's fabric, whichever
// front end the holder came through: a pod of the device plugin (package
// agent's binder, at PreStartContainer) or a DRA claim (package agent/dra,
// at Prepare and at its pod's sandbox). A front end translates its API's
// calls into the [Engine]'s steps and adds only what its API has of its
// own (a pod's devices and files and hsn interface; a claim's devices, CDI
// spec and status):
//
//   - [Engine.Admit] leases the holder's VNI and records it durably before
//     any service exists ([Engine.AdmitToBind]: durably with the bind that
//     follows in the same request); [Engine.Ensure] makes one service per NIC,
//     unbound; [Engine.Bind] binds them to a namespace its caller opened,
//     replacing those that admit another; [Engine.Unbind],
//     [Engine.Check] (what a container must find before it starts),
//     [Engine.Rollback] and [Engine.Teardown] (destroys retried while
//     busy, the lease released with the last local holder);
//   - at a start, [Engine.ForgetLost] before anything is made,
//     [Engine.Revive] (a live holder's services trusted only once its
//     namespace is verified, by the runtime or its pin; otherwise
//     unbound), [Engine.Orphans] and [Engine.DropStalePins].
//
// Beneath it: the lease holds ([Leases]), the namespace holds
// ([Namespaces], pinned by bind mounts so that a hold outlives the agent),
// the service lifecycle ([Fabric]: the only code in the agent that
// creates, binds or destroys a CXI service, counting the same metrics in
// both modes) and the environment ([Env], as Slurm's Slingshot plugin
// names it). One record type (checkpoint.Holder) carries every holder: a
// second copy of any of this would be a second place for an invariant to
// be missing.
package engine
