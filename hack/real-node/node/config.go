package node

import (
	"fmt"
	"os"
	"path/filepath"
)

// containerdConfig is containerd 2.x's configuration (version 4), with
// every path that it would otherwise put in /var/lib, /run, /etc/cni or
// /var/run/cdi under the node's root. The facts behind each line are in
// ../shared/reference/real-node.md.
func (n *Node) containerdConfig() string {
	return fmt.Sprintf(`version = 4
root = %[1]q
state = %[2]q

[plugins.'io.containerd.server.v1.grpc']
  address = %[3]q
[plugins.'io.containerd.server.v1.ttrpc']
  address = %[4]q
[plugins.'io.containerd.server.v1.debug']
  address = ''
[plugins.'io.containerd.internal.v1.opt']
  path = %[5]q
[plugins.'io.containerd.nri.v1.nri']
  disable = %[13]v
  socket_path = %[6]q
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %[7]q
[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = [%[8]q]
  # The namespaces' bind mounts under the state directory, not the host's
  # /var/run/netns.
  netns_mounts_under_state_dir = true
  # No CAP_SYS_RESOURCE on the CI machine: without this every sandbox fails
  # with runc's "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = [%[9]q]
  conf_dir = %[10]q
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = %[11]q
  Root = %[12]q
  SystemdCgroup = false
`,
		n.path("containerd/root"), n.path("containerd/state"),
		n.path("run/containerd.sock"), n.path("run/containerd.sock.ttrpc"),
		n.path("containerd/opt"), n.path("nri/nri.sock"), PauseImage,
		n.path("cdi"), n.opts.CNIBinDir, n.path("cni/net.d"),
		n.opts.Runc, n.path("runc"), n.nriOff)
}

// cniConfig is the pod network: Debian's bridge and host-local plugins,
// the node's address as the pods' gateway, no masquerading (the node's
// network namespace has no way out anyway).
func (n *Node) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "real-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
`, n.path("cni/ipam"), n.PodCIDR)
}

// kubeletConfig is the kubelet's configuration file.
func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The CI machine has cgroup v1 (a hybrid hierarchy) and no swap control.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%[1]s
podLogsDir: %[2]q
volumePluginDir: %[3]q
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[4]q}
authorization: {mode: AlwaysAllow}
tlsCertFile: %[5]q
tlsPrivateKeyFile: %[6]q
clusterDomain: cluster.local
# No DNS server runs; an address keeps the kubelet from warning on every
# pod (MissingClusterDNS). The tests' pods resolve nothing.
clusterDNS: ["10.96.0.10"]
resolvConf: ""
maxPods: 60
# A test node's disk is shared with builds: never evict for disk, never
# collect the locally built images (there is no registry to pull again).
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 24h
syncFrequency: 5s
nodeStatusUpdateFrequency: 4s
serializeImagePulls: false
shutdownGracePeriod: 0s
%[7]s`,
		n.path("run/containerd.sock"), filepath.Join(n.logDir(), "pods"), n.path("kubelet-plugins"),
		n.pki.path("ca.crt"), n.pki.path(kubeletCert(n.Name)+".crt"), n.pki.path(kubeletCert(n.Name)+".key"),
		n.cgroupRootConfig())
}

// cgroupRootConfig is the kubelet configuration's cgroupRoot line on a
// node of a cluster, "" on Start's node (the kubelet's default, "/").
// Two kubelets under one cgroup root would each take the other's pods'
// cgroups for orphans of its own and kill them.
func (n *Node) cgroupRootConfig() string {
	if n.opts.cgroupRoot == "" {
		return ""
	}
	return fmt.Sprintf("# Its own cgroup root: a kubelet removes the pod cgroups under its root\n# that are not its pods'.\ncgroupRoot: %q\n", n.opts.cgroupRoot)
}

func writeFiles(files map[string]string) error {
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
