// Package controllertest drives a [controller.Allocator] the same way over
// any store, so that what the controller promises is checked on the sqlite
// store by the controller's unit tests and on the Kubernetes store against
// a real API server (hack/kube-apiserver) by one body of code.
//
// It is for tests only: nothing the programs ship imports it.
package controllertest
