// Package netns finds a pod's network namespace, whose inode is the member
// the agent gives the pod's CXI services, and holds it open.
//
// An inode names a namespace only while the namespace lives: once the last
// process has left it and its last bind mount is gone, the kernel frees it
// and gives the number to the next namespace made, of any pod. So the
// finders' Open methods return a [Handle], an open descriptor of the
// namespace, which keeps it alive until it is closed: the agent holds it
// from the moment the namespace is resolved until the pod's services are
// destroyed; after a restart it opens the pod's namespace again and
// checks it is the recorded one.
//
// Two finders, tried in this order by [Fallback]:
//
//   - [CRI] asks the container runtime over its CRI RuntimeService socket:
//     the pod's newest ready sandbox (label io.kubernetes.pod.uid), then its
//     verbose status. The status's namespace options say whether the pod
//     uses the host network; the runtime-specific "info" JSON names the
//     sandbox process ("pid", containerd and CRI-O with an infra container)
//     and the namespace's path (runtimeSpec.linux.namespaces, all of them;
//     CRI-O without an infra container names only this). See
//     [ParseSandboxInfo] for the exact fields.
//   - [Proc] needs no runtime: every container of a pod, the sandbox
//     ("pause") process first, shares the pod's network namespace and runs
//     in a cgroup whose path names the pod UID (cgroupfs: ".../pod<uid>/...",
//     systemd: "...-pod<uid_with_underscores>.slice"). The namespace is
//     opened from the /proc/<pid>/ns/net link of each.
//
// Whatever the way, a namespace equal to the host's is refused
// ([ErrHostNetwork]): a host-netns member would admit every host process.
// A file that is not an nsfs inode of a network namespace is refused
// ([ErrNotNetns]).
package netns
