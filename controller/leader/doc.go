// Package leader runs the controller on two or more replicas: one leader,
// elected through a Kubernetes Lease (client-go's leaderelection), runs
// the controller; the others wait, not ready, and take over when the
// leader stops renewing.
//
// The leader's work gets a context that ends when leadership is lost. On a
// clean shutdown the Lease is released only after that work has returned,
// so a successor starts at once and never overlaps it. After a crash the
// successor waits for the Lease to expire (LeaseDuration). Election timing
// alone cannot rule out two replicas acting at once (a paused process
// wakes up believing it still leads); the controller's Kubernetes store
// fences out such a writer itself (see package
// [github.com/slingshot-k8s/slingshot/controller/store/kube]).
package leader
