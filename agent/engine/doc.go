// Package engine is what the agent's two front ends share of a holder's
// life: the device plugin's PreStartContainer (package agent) and DRA's
// Prepare and NRI bind (package agent/dra). It owns what both must get
// right the same way:
//
//   - lease holds ([Leases]): which local holders (pods, claims) hold each
//     controller lease, so that the node's hold is released only with its
//     last holder, and no lock is held across a call to the controller;
//   - namespace holds ([Namespaces]): the network namespaces the services
//     name as their member, held open from the bind until the services are
//     destroyed, and pinned by bind mounts (a [Pinner]) so that the hold
//     outlives the agent: an inode cannot pass to another pod meanwhile;
//   - the service lifecycle ([Fabric]): the only code in the agent that
//     creates, binds or destroys a CXI service. Every service is made
//     unbound and bound to a namespace its caller verified; the handle is
//     kept from the first bind attempt; the check a container must pass
//     before it starts; and the metrics of failed and stuck services,
//     counted the same whichever front end asked;
//   - the environment ([Env]): the SLINGSHOT_* variables, as Slurm's
//     Slingshot plugin names them.
//
// A second copy of any of these is a second place for an invariant to be
// missing. The binds, rollbacks, teardowns and start-up reconciles
// themselves are still each front end's own, over two record types; moving
// them here is the rest of the engine's work.
package engine
