// Package netns finds a pod's network namespace inode, the member the
// agent gives the pod's CXI services.
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
//     systemd: "...-pod<uid_with_underscores>.slice"). The inode is read
//     from the /proc/<pid>/ns/net link, "net:[<inode>]".
//
// Whatever the way, a namespace equal to the host's is refused
// ([ErrHostNetwork]): a host-netns member would admit every host process.
// CRI also refuses any file that is not an nsfs inode of a network
// namespace ([ErrNotNetns]).
package netns
