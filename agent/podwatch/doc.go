// Package podwatch tells the agent which pod holds which device, and when
// a pod is gone.
//
// The source of truth is the kubelet's PodResources v1 API on its local
// unix socket, listed at a poll interval and at once whenever the device
// manager's checkpoint file changes (fsnotify). PodResources carries no pod
// UIDs; they are read, best effort, from the device manager's checkpoint.
//
// Older kubelets also list terminated pods; their devices are freed by the
// time they are listed, so a pod counts as holding a device only while the
// device appears under it. A pod listed without any watched device is
// treated as gone, as is one no longer listed.
package podwatch
