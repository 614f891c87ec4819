// Package e2e tests the controller's Kubernetes store and leader election,
// and the chart's ResourceSlice admission policy for DRA agents, against a
// real kube-apiserver on a real etcd (package apiserver). Run
// with `make e2e-k8s`, which installs etcd and builds the API server first.
package e2e
