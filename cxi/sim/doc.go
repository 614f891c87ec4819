// Package sim is a simulated CXI driver for the service commands: a
// [Device] that accepts the same raw command bytes as /dev/cxiN and
// answers them by the rules of the real driver (HPE shs-cxi-driver,
// cass_svc.c, cxi_user_core.c, cass_rgroup.c), so that
// uapi.NewDevice(simDevice) runs the real encoding end to end on machines
// without a Slingshot NIC.
//
// # Rules it follows
//
// The command transport: exact command lengths (EINVAL otherwise), op codes
// outside the enum (EINVAL), admin-only commands refused on a virtual
// function or without CAP_SYS_ADMIN (EPERM), responses written through the
// pointer in the command (EFAULT when it is nil).
//
// The services: service 1 is the default service, created at "module load"
// with VNIs 1 and 10, all four user traffic classes and 512 reserved TLEs
// in TLE pool 0; it is disabled (disable_default_svc=1) and cannot be
// destroyed (EINVAL). Beside it, unless [Options.NoEthernetService], is
// service 2, "ethernet-svc", which cxi_eth allocates on a PF when its hsn
// link comes up (cxi_eth_ops.c hw_setup), as on every booted node: a
// system service restricted to uid 0, with no VNIs, enabled, reserving 8
// PTEs, 1 TXQ, TGQ, EQ and AC and 660 LEs in an LE pool of its own, and
// holding an LNI, so destroying or disabling it is EBUSY. IDs are the
// lowest free (the driver's xa_alloc), so user services start at 3.
// Descriptors are validated like validate_descriptor (at most 4 VNIs, VNI
// 0 invalid, member types below CXI_SVC_MEMBER_MAX, res <= max <= device
// maximum: EINVAL; the device maxima are [Options.Max], which
// [MaxFromSysfs] takes from the NIC's num_* properties, so a NIC
// simulated from a sysfs tree refuses what the real one would); duplicate
// members give EEXIST and a member ID of
// 0xffffffff gives EBADR, as the access-control list does. Resources are
// reserved like reserve_rsrcs: resource_limits=0 means the device maxima;
// a non-default service asking for any TLEs gets res=max=max(res,8) and one
// of the 4 TLE pools; a service reserving LEs takes one of LE pools 1-15
// (pool 0 is shared by every service reserving none); running out gives
// ENOSPC with fail info. A service with restricted_vnis=1 is enabled at
// once, each VNI taking one of the 256 RMU VNI-list entries (ENOSPC when
// they run out); restricted_vnis=0 leaves it disabled until
// SVC_SET_VNI_RANGE gives it a range (a power-of-two count of VNIs aligned
// to it; EINVAL otherwise) and it is enabled. Every VNI and range is a
// TX/RX profile, and a new profile that overlaps an existing one is EEXIST
// unless both are single VNIs (vni_overlap_test): services may share an
// exact VNI, but no range may overlap another service's VNI or range, the
// disabled default service's VNIs 1 and 10 included. Destroy and enable
// give EBUSY while LNIs use the service ([Device.SetInUse] stands in for
// LNIs). SVC_SET_NETNS gives EEXIST when the service has uid, gid or open
// members or already has that namespace, EBUSY while it is enabled, EBADR
// for inode 0xffffffff; SVC_GET_NETNS gives EINVAL when there is none and
// otherwise the lowest inode.
//
// A test may make a NIC refuse a command on purpose ([Device.InjectFault]):
// with an errno the real driver gives for that command, changing nothing,
// for every process that uses the NIC, a number of times or until cleared.
// It stands in for conditions the simulation cannot bring about between
// two of a client's commands, such as another user taking the last RMU
// entry between a prepare and a bind.
//
// Commands the simulation does not model (LNI allocation, SVC_UPDATE,
// exclusive CP, LPR, resource-use queries, everything outside services)
// fail with EOPNOTSUPP.
//
// # State
//
// The state of each simulated NIC lives in a JSON file in a directory the
// caller names, written atomically (temporary file, fsync, rename, fsync of
// the directory) and guarded by flock(2) on a lock file beside it. Every
// command reloads it under the lock, so several Devices, in one process or
// many, share one NIC, and a restarted agent finds the services it left —
// as on a real node, where services outlive the processes that made them.
package sim
