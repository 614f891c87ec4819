// Package hsnlink puts an interface on the node's high-speed network (HSN)
// into a pod's network namespace, without Multus or a CNI plugin: a macvlan
// (bridge mode) or ipvlan (L2) child of the host's hsn netdev, carrying an
// address the agent's allocator chose. The agent calls [Attach] at
// PreStart, [Check] when it reconciles, and [Detach] at pod exit.
//
// The pod's namespace is taken as an open descriptor ([Namespace]), the one
// the agent already holds, never reopened by path. The child is created by
// the kernel directly inside that namespace (IFLA_NET_NS_FD, as the CNI
// macvlan and ipvlan plugins do), under a temporary name that is then
// changed to [Spec.Name]; so a crash never leaves it in the host's
// namespace, and a child left in the pod's namespace dies with it (the
// kernel deletes macvlan and ipvlan links of a namespace that is
// destroyed).
//
// The parent is looked up in the calling thread's network namespace, the
// host's for the agent. The caller's thread never changes namespace: the
// netlink socket of the pod's namespace is opened on a thread of its own,
// locked and switched into the pod's namespace, which ends with the
// goroutine that opened it.
//
// The functions are safe for concurrent use on different namespaces; calls
// on one namespace and interface name are to be serialized by the caller
// (the agent holds the pod's lock).
package hsnlink
