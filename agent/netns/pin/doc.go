// Package pin keeps network namespaces alive by bind mounts, so that the
// hold outlives the agent's process and, deployed as the chart deploys
// it, the agent's container.
//
// A CXI service names its member by the namespace's inode. A namespace
// lives while a process is in it, a descriptor is open on it or a bind
// mount of it exists; once none is left the kernel frees it and gives the
// inode to the next namespace made, of any pod. The agent holds a pod's
// namespace by an open descriptor (package netns), which ends with the
// agent: while it is down or restarting a service could admit another
// pod. A pin is the third kind of hold, a bind mount of the namespace on
// a file, the way iproute2's `ip netns add` and CNI runtimes keep sandbox
// namespaces under /var/run/netns.
//
// [Pins] keeps one pin per holder (a pod's key, a claim's holder) as
// <dir>/<name>, where name is the holder escaped reversibly ([FileName]).
// [New] makes dir a mount point with shared propagation, so that a pin
// made in the agent's container, whose state directory is a hostPath
// mounted with mountPropagation Bidirectional, is also a mount in the
// host's mount namespace: it stays when the container's mount namespace
// is torn down, and the next container finds it through the same hostPath.
//
// # Crash consistency
//
// A pin is made in steps: the file created, then the namespace mounted on
// it. A crash between leaves a plain empty file, which [Pins.Open] reports
// as [ErrStale] and removes. Replacing a holder's pin by one of another
// namespace mounts the new one on <name>.tmp first, then moves it to
// <name>; the kernel refuses to rename a mount point, so "moves" is:
// unmount the old from <name>, bind <name>.tmp on <name>, unmount
// <name>.tmp. The new namespace is held from the first step on, the old
// until it is replaced. Should the agent die between the steps, the next
// call on the holder settles the files: <name> when it is a pin, else
// <name>.tmp when that is one (the replacement had already dropped the
// old); a leftover <name>.tmp is dropped.
//
// # Concurrency
//
// A Pins is safe for concurrent use. Two Pins over one directory, in one
// process or two, must not run at once: the steps above assume a single
// writer, as the agent is the only one on its node.
package pin
