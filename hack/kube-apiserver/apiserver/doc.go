// Package apiserver runs a real kube-apiserver (built from
// k8s.io/kubernetes by this module) on a real etcd (Debian's etcd-server)
// on loopback, for the controller's Kubernetes store tests. Start waits
// for /readyz; nothing sleeps.
package apiserver
