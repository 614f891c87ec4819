// Package podwatch tells the agent which pod holds which device, and when
// a pod is gone.
//
// It has two sources. The kubelet's PodResources v1 API on its local unix
// socket lists the active pods and their devices, but no UIDs; the kubelet
// limits it to 100 requests a second (burst 10) for every client of the
// node together. The device manager's checkpoint file
// (<kubelet-dir>/device-plugins/kubelet_internal_checkpoint) names each
// allocation's pod UID and container; the kubelet writes it at Allocate,
// before PreStartContainer, and whenever a device plugin sends it a device
// list, from what it holds in memory, and never deletes it.
//
// A pod is gone only when the kubelet no longer holds its devices: the
// last successful List and the checkpoint both no longer name it. Right
// after a kubelet restart the List is empty for about a second while the
// checkpoint still holds every allocation; a failed List, or a checkpoint
// that cannot be read or parsed, proves nothing. The kubelet frees a gone
// pod's devices in memory at the next List but rewrites the file only at
// its next write, so when a List no longer shows a device the checkpoint
// names, the watcher nudges it (Config.Nudge: the device plugin sends its
// unchanged list again), paced per resource.
//
// Lists are coalesced: one runs at a time, a caller gets a List that began
// after it asked (or, for PreStart, after the checkpoint named its
// devices), and callers waiting together share one. They are spaced by
// MinListInterval, and a List refused for the rate limit is retried with
// backoff within the caller's context. A checkpoint write costs a re-read
// of the file, and a List only when it names an allocation made after the
// last List began. PreStart usually needs no List at all.
//
// Older kubelets also list terminated pods; their devices are freed by the
// time they are listed, so a pod counts as holding a device only while the
// device appears under it.
package podwatch
