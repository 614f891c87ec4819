// Package store defines the controller's durable state and the small
// interface every backend implements: load everything at start, then commit
// batches of versioned puts and deletes atomically.
//
// Every record carries a Version. An [Op] names the version the record must
// have now (0: it must not exist) and a Put stores Expect+1, so a backend
// can check each write compare-and-swap style; an optimistic store such as
// one on the Kubernetes API maps this onto resourceVersion. The controller
// is the single writer of its store and keeps the live state in memory; a
// conflict therefore means someone else wrote, and the controller reloads.
//
// Backends: [github.com/slingshot-k8s/slingshot/controller/store/sqlite]
// (embedded default, one replica) and
// [github.com/slingshot-k8s/slingshot/controller/store/kube] (custom
// resources on the Kubernetes API, for replicas with leader election).
// [github.com/slingshot-k8s/slingshot/controller/store/storetest] is the
// conformance suite every backend passes. [Export] and [Import] move every
// record from one backend to another.
package store
