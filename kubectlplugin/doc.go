// Package kubectlplugin is `kubectl slingshot`, the cluster user's view of
// Slingshot on Kubernetes: the job VNI leases and the quarantine
// (vnis), one pod's VNI, NICs, services and hsn address (pod), and each
// node's NIC health, services, pool fill and taints (nodes). The binary
// is cmd/kubectl-slingshot; kubectl finds it on PATH by its name.
//
// Everything is read through the API server with the user's kubeconfig,
// so Kubernetes RBAC alone decides who sees what:
//
//   - the controller's store objects (VNILease, VNIQuarantine,
//     StoreJournal; deploy/crds), as the controller's Kubernetes store
//     writes them (controller/store/kube);
//   - Pods, Nodes and ResourceClaims;
//   - each node's agent report ([inspect.Report]), got by running
//     `slingshot-agent inspect --json` in the agent's pod through the
//     pods/exec subresource (see [ExecInspector] for why exec and not
//     pods/proxy).
//
// The joining and formatting are pure functions of those objects
// ([BuildVNIs], [BuildPod], [BuildNodes] and the Write functions), tested
// on fixtures; [Cluster] does the reading.
package kubectlplugin
