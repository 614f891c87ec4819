// Package gang benchmarks a gang start on a real control plane: the
// slingshot-controller binary on the Kubernetes store of a real
// kube-apiserver and etcd, and simulated nodes that run the agent's own
// lease path (a controllerclient.Client per node with its heartbeats and
// pod VNI pool, engine.Leases counting the node's local holders) and bind
// one CXI service per pod on the simulated driver (cxi/sim). See
// BenchmarkGang; make gang-bench runs it.
package gang
