// Package engine is the one bind engine under the agent's two front ends:
// the device plugin's PreStartContainer (package agent) and DRA's
// Prepare and NRI bind (package agent/dra). It owns what both must get
// right the same way:
//
//   - lease holds ([Leases]): which local holders (pods, claims) hold each
//     controller lease, so that the node's hold is released only with its
//     last holder, and no lock is held across a call to the controller;
//   - namespace holds ([Namespaces]): the network namespaces the services
//     name as their member, held open from the bind until the services are
//     destroyed, so that an inode cannot pass to another pod meanwhile;
//   - the service lifecycle ([BindAll], [CheckBound]): binding every
//     service of a holder or none admitting an unheld namespace, and the
//     check a container must pass before it starts;
//   - the environment ([Env]): the SLINGSHOT_* variables, as Slurm's
//     Slingshot plugin names them.
//
// A second copy of any of these is a second place for an invariant to be
// missing; the front ends are adapters over this package.
package engine
