// Package node runs a whole single-node Kubernetes cluster for tests:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
// with runc and the CNI plugins, and a kubelet, each a [Proc] that tests
// can stop and start again. Everything the node writes is under one root
// directory, and it runs as the init of its own PID, mount and network
// namespaces ([Enter]), so that nothing of it outlives the run.
// [StartCluster] runs one control plane and several nodes instead, each
// node's containerd and kubelet in namespaces of their own.
package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"golang.org/x/sys/unix"
)

// Fixed addresses of the node's own network namespace, where nothing else
// listens.
const (
	DefaultNodeIP = "10.200.0.1"
	PodCIDR       = "10.88.0.0/16"
	ServiceCIDR   = "10.96.0.0/24"
	APIServerPort = 6443
	// FabricBridge joins the peers of the hsn netdevs (Options.HSNNetdevs).
	FabricBridge = "hsnfabric"
	// PauseImage is the sandbox image, built locally (see package images).
	PauseImage = "localhost/slingshot-e2e/pause:1"
)

// Options say where the node lives and where its programs are.
type Options struct {
	// Root holds everything the node writes; it must exist.
	Root string
	// BinDir holds kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet, containerd, containerd-shim-runc-v2 and ctr.
	BinDir string
	// Etcd, Runc: the binaries; default: found on PATH.
	Etcd, Runc string
	// CNIBinDir holds the CNI plugins; default /usr/lib/cni (Debian).
	CNIBinDir string
	// NodeName default "node-1"; NodeIP default DefaultNodeIP; PodCIDR
	// default PodCIDR.
	NodeName, NodeIP, PodCIDR string
	// HSNNetdevs are the hsn netdevs of the mock NICs ("hsn0", "hsn1"),
	// made in the node's network namespace as veth links whose peers are
	// ports of one bridge, the node's stand-in for the Slingshot fabric:
	// macvlan children of any of them reach each other. None: no such
	// link.
	HSNNetdevs []string
	// Ready bounds each wait of Start; default 4 min.
	Ready time.Duration
	// Logf reports progress; nil: silent.
	Logf func(format string, args ...any)
	// FeatureGates are turned on in the API server, the
	// controller-manager, the scheduler and every kubelet
	// (--feature-gates=A=true,...); RuntimeConfig is the API server's
	// --runtime-config (API versions served beyond the defaults).
	FeatureGates  []string
	RuntimeConfig string

	// cgroupRoot is the kubelet's cgroup root ("": its default, "/") and
	// logDir where the node's programs log ("": Root/logs); StartCluster
	// sets both for each node.
	cgroupRoot, logDir string
}

// Node is a running single-node cluster (Start), or one node of a Cluster
// (StartCluster). Tests restart the components of Start's node through
// the Procs.
type Node struct {
	opts Options
	pki  *pki

	Name, IP string
	// Kubeconfig is an admin kubeconfig file; Config and Client are the
	// same credentials in Go.
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	// ContainerdSocket is the CRI and containerd API socket; NRISocket
	// containerd's NRI socket, alone in its directory (a pod that mounts
	// the directory to reach it reaches nothing else); CDIDir the one CDI spec directory
	// containerd reads; KubeletDir the kubelet's root directory; LogDir
	// every component's log.
	ContainerdSocket, NRISocket, CDIDir, KubeletDir, LogDir string
	// PodCIDR is the range the node's pods get addresses from.
	PodCIDR string

	// Etcd, APIServer, ControllerManager and Scheduler are the control
	// plane's, shared by every node of a cluster (StartCluster).
	// Containerd and Kubelet are nil on a node of a cluster: they run in
	// the node's own namespaces, under its init (Stop stops it).
	Etcd, APIServer, ControllerManager, Scheduler, Containerd, Kubelet *Proc

	// apiHost is the API server's address as the node reaches it; "":
	// the node's own (Start).
	apiHost string
	// hostRoot is where this process finds opts.Root, which the node's
	// own processes see at opts.Root: the same directory for Start's
	// node, ClusterNodeRoot for a node of a cluster.
	hostRoot string
	// worker is the init of a cluster node's namespaces; nil for Start's.
	worker *worker
	// nriOff disables NRI in containerd's configuration
	// (RestartContainerd); NRI is on by default.
	nriOff bool
}

// path is rel under the node's root, as the node's processes see it.
func (n *Node) path(rel string) string { return filepath.Join(n.opts.Root, rel) }

// APIServerHost is the API server's address as the node's processes
// reach it: a node's pods on the host network (the controller, the agent
// with DRA) get it as KUBERNETES_SERVICE_HOST.
func (n *Node) APIServerHost() string {
	if n.apiHost != "" {
		return n.apiHost
	}
	return n.IP
}

// NodePath turns a path as this process sees it (the Node's fields, the
// files a test writes into the node's root) into the same file as the
// node's own processes see it: what chart values and the node's programs
// are given. The identity on Start's node, which shares this process's
// mount namespace; on a node of a cluster the node's root (and its
// kubelet directory) sit at paths that are the same on every node, so
// that one set of chart values fits them all.
func (n *Node) NodePath(p string) string {
	if n.hostRoot == "" || n.hostRoot == n.opts.Root {
		return p
	}
	if rest, ok := cutDir(p, filepath.Join(n.hostRoot, "kubelet")); ok {
		return filepath.Join(kubeletRoot, rest)
	}
	if rest, ok := cutDir(p, n.hostRoot); ok {
		return filepath.Join(n.opts.Root, rest)
	}
	return p
}

// HostPath is the inverse of NodePath: a path as the node's processes see
// it, as this process finds it.
func (n *Node) HostPath(p string) string {
	if n.hostRoot == "" || n.hostRoot == n.opts.Root {
		return p
	}
	if rest, ok := cutDir(p, kubeletRoot); ok {
		return filepath.Join(n.hostRoot, "kubelet", rest)
	}
	if rest, ok := cutDir(p, n.opts.Root); ok {
		return filepath.Join(n.hostRoot, rest)
	}
	return p
}

// cutDir returns p relative to dir, when p is dir or below it.
func cutDir(p, dir string) (string, bool) {
	if p == dir {
		return ".", true
	}
	rest, ok := strings.CutPrefix(p, dir+"/")
	return rest, ok
}

// KubeletLog is the kubelet's log file, as this process finds it.
func (n *Node) KubeletLog() string { return filepath.Join(n.LogDir, "kubelet.log") }

// kubeletRoot is the kubelet's root directory on every node: its device
// manager keeps its sockets and checkpoint in
// /var/lib/kubelet/device-plugins whatever the root directory says.
const kubeletRoot = "/var/lib/kubelet"

func (n *Node) logf(format string, args ...any) {
	if n.opts.Logf != nil {
		n.opts.Logf(format, args...)
	}
}

// Start brings the node up in the calling process's namespaces, which must
// be the ones [Enter] made: etcd, the API server, containerd, the
// controller-manager, the scheduler and the kubelet, and waits until the
// node is Ready and the default ServiceAccount exists. On error what was
// started is stopped.
func Start(ctx context.Context, o Options) (_ *Node, err error) {
	if os.Getpid() != 1 {
		return nil, errors.New("node.Start: not the init of its own PID namespace; run it under node.Enter")
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	n := newNode(o, o.Root)
	n.Kubeconfig = filepath.Join(o.Root, "admin.kubeconfig")
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	if err := n.makeDirs(); err != nil {
		return nil, err
	}
	if err := n.privateMounts(); err != nil {
		return nil, fmt.Errorf("node mounts: %w", err)
	}
	if err := setupNetwork(n.IP, o.HSNNetdevs, ""); err != nil {
		return nil, fmt.Errorf("node network: %w", err)
	}
	ip := net.ParseIP(n.IP)
	if n.pki, err = newPKI(n.path("pki"), []net.IP{ip, net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}, []pkiNode{{n.Name, ip}}); err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if err := n.writeControlPlaneConfigs(); err != nil {
		return nil, err
	}
	if err := n.writeNodeConfigs(); err != nil {
		return nil, err
	}
	n.makeControlPlaneProcs()
	n.makeNodeProcs()
	err = runSteps(ctx, o.Ready, func(name string, took time.Duration) {
		n.logf("node: %s up in %s", name, took.Round(time.Millisecond))
	}, []step{
		{"etcd", n.startEtcd},
		{"kube-apiserver", n.startAPIServer},
		{"containerd", n.startContainerd},
		{"controller-manager and scheduler", n.startControlPlane},
		{"kubelet", n.startKubelet},
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// step is one part of a node or cluster to start, in order.
type step struct {
	name string
	run  func(context.Context) error
}

// runSteps runs steps in order, each within ready, and tells up how long
// each took; the first that fails ends it.
func runSteps(ctx context.Context, ready time.Duration, up func(name string, took time.Duration), steps []step) error {
	for _, s := range steps {
		start := time.Now()
		sctx, cancel := context.WithTimeout(ctx, ready)
		err := s.run(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("start %s: %w", s.name, err)
		}
		up(s.name, time.Since(start))
	}
	return nil
}

// newNode is the Node of o whose files are at o.Root as its own processes
// see it and at hostRoot as this process does.
func newNode(o Options, hostRoot string) *Node {
	n := &Node{opts: o, Name: o.NodeName, IP: o.NodeIP, PodCIDR: o.PodCIDR, hostRoot: hostRoot}
	n.ContainerdSocket = n.HostPath(n.path("run/containerd.sock"))
	n.NRISocket = n.HostPath(n.path("nri/nri.sock"))
	n.CDIDir = n.HostPath(n.path("cdi"))
	// root/kubelet, bind-mounted by privateMounts.
	n.KubeletDir = n.HostPath(kubeletRoot)
	n.LogDir = n.HostPath(n.logDir())
	return n
}

// logDir is where the node's programs write their logs, as they see it.
func (n *Node) logDir() string {
	if n.opts.logDir != "" {
		return n.opts.logDir
	}
	return n.path("logs")
}

// makeDirs makes the directories of the node's root.
func (n *Node) makeDirs() error {
	for _, d := range []string{"run", "nri", "cdi", "kubelet", "cni/net.d", "cni/ipam"} {
		if err := os.MkdirAll(n.HostPath(n.path(d)), 0o755); err != nil {
			return err
		}
	}
	return os.MkdirAll(n.LogDir, 0o755)
}

func (o *Options) defaults() error {
	if o.Root == "" || o.BinDir == "" {
		return errors.New("node: Root and BinDir are required")
	}
	var err error
	if o.Etcd == "" {
		if o.Etcd, err = exec.LookPath("etcd"); err != nil {
			return fmt.Errorf("etcd (Debian etcd-server): %w", err)
		}
	}
	if o.Runc == "" {
		if o.Runc, err = exec.LookPath("runc"); err != nil {
			return fmt.Errorf("runc (Debian runc): %w", err)
		}
	}
	if o.CNIBinDir == "" {
		o.CNIBinDir = "/usr/lib/cni"
	}
	if _, err := os.Stat(filepath.Join(o.CNIBinDir, "bridge")); err != nil {
		return fmt.Errorf("CNI plugins (Debian containernetworking-plugins): %w", err)
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "containerd", "containerd-shim-runc-v2", "ctr"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("%s (make real-node-bin builds it): %w", b, err)
		}
	}
	if o.NodeName == "" {
		o.NodeName = "node-1"
	}
	if o.NodeIP == "" {
		o.NodeIP = DefaultNodeIP
	}
	if o.PodCIDR == "" {
		o.PodCIDR = PodCIDR
	}
	if o.Ready == 0 {
		o.Ready = 4 * time.Minute
	}
	return nil
}

// privateMounts covers the host directories that the node's programs
// write to whatever their configuration says with tmpfs mounts of the
// node's own mount namespace, gone with it: /var/lib, /var/log (the
// kubelet's /var/log/containers links) and /run. The kubelet's device
// manager keeps its sockets and checkpoint in /var/lib/kubelet/device-plugins
// whatever its root directory, so the kubelet's root is root/kubelet,
// bind-mounted at /var/lib/kubelet, where the agent's chart values expect
// it too.
func (n *Node) privateMounts() error {
	if err := privateTmpfs(); err != nil {
		return err
	}
	if err := os.MkdirAll(kubeletRoot, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(n.path("kubelet"), kubeletRoot, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", n.path("kubelet"), kubeletRoot, err)
	}
	return nil
}

// privateTmpfs mounts tmpfs on /var/lib, /var/log and /run.
func privateTmpfs() error {
	for _, dir := range []string{"/var/lib", "/var/log", "/run"} {
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
		}
	}
	return nil
}

// setupNetwork gives the node's fresh network namespace a loopback, an
// address on a link (the node's InternalIP) and a default route through
// it, and lets it forward for the pods. The link is one end of a veth
// pair: the CI machine's kernel has no dummy links, and a veth whose peer
// is up has a carrier. With gateway "" the pair is made here and its peer
// left alone (Start's node, which runs the control plane too); else the
// link node0 was moved into the namespace by the cluster, its peer a port
// of the cluster's bridge, and the default route goes through gateway.
// Each of hsn is made the same way, without an address, its peer a port
// of the bridge FabricBridge, so that the children the agent puts on one
// hsn netdev reach those on another, as through the fabric's switches.
func setupNetwork(ip string, hsn []string, gateway string) error {
	cmds := [][]string{{"link", "set", "lo", "up"}}
	if gateway == "" {
		cmds = append(cmds, []string{"link", "add", "name", "node0", "type", "veth", "peer", "name", "node0-peer"},
			[]string{"link", "set", "node0-peer", "up"})
	}
	cmds = append(cmds,
		[]string{"addr", "add", ip + "/24", "dev", "node0"},
		[]string{"link", "set", "node0", "up"})
	if gateway == "" {
		cmds = append(cmds, []string{"route", "add", "default", "dev", "node0"})
	} else {
		cmds = append(cmds, []string{"route", "add", "default", "via", gateway, "dev", "node0"})
	}
	if len(hsn) > 0 {
		cmds = append(cmds, []string{"link", "add", "name", FabricBridge, "type", "bridge"},
			[]string{"link", "set", FabricBridge, "up"})
	}
	for _, name := range hsn {
		peer := name + "-fabric"
		if len(peer) > 15 {
			return fmt.Errorf("hsn netdev %q: name too long for its peer %q", name, peer)
		}
		cmds = append(cmds,
			[]string{"link", "add", "name", name, "type", "veth", "peer", "name", peer},
			[]string{"link", "set", peer, "master", FabricBridge},
			[]string{"link", "set", peer, "up"},
			[]string{"link", "set", name, "up"})
	}
	if err := runIP(cmds); err != nil {
		return err
	}
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}

// runIP runs iproute2's ip with each of cmds in turn.
func runIP(cmds [][]string) error {
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(c, " "), err, out)
		}
	}
	return nil
}

// writeControlPlaneConfigs writes the kubeconfigs of the admin and of
// the control plane's components and makes the admin's client.
func (n *Node) writeControlPlaneConfigs() error {
	server := fmt.Sprintf("https://%s:%d", n.APIServerHost(), APIServerPort)
	for _, k := range []struct{ file, user string }{
		{n.Kubeconfig, "admin"},
		{n.pki.path("controller-manager.kubeconfig"), "system:kube-controller-manager"},
		{n.pki.path("scheduler.kubeconfig"), "system:kube-scheduler"},
	} {
		if err := n.pki.kubeconfig(k.file, server, k.user); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", n.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, -1
	n.Config = cfg
	n.Client, err = kubernetes.NewForConfig(cfg)
	return err
}

// kubeletKubeconfig is the node's kubelet's kubeconfig, in the pki
// directory.
func (n *Node) kubeletKubeconfig() string { return n.pki.path("kubelet-" + n.Name + ".kubeconfig") }

// writeNodeConfigs writes the kubelet's kubeconfig and the configuration
// of containerd, the CNI plugins and the kubelet.
func (n *Node) writeNodeConfigs() error {
	server := fmt.Sprintf("https://%s:%d", n.APIServerHost(), APIServerPort)
	if err := n.pki.kubeconfig(n.kubeletKubeconfig(), server, "system:node:"+n.Name); err != nil {
		return err
	}
	return writeFiles(map[string]string{
		n.HostPath(n.path("containerd/config.toml")):          n.containerdConfig(),
		n.HostPath(n.path("cni/net.d/10-real-node.conflist")): n.cniConfig(),
		n.HostPath(n.path("kubelet-config.yaml")):             n.kubeletConfig(),
	})
}

// makeControlPlaneProcs makes the Procs of etcd, the API server, the
// controller-manager and the scheduler.
func (n *Node) makeControlPlaneProcs() {
	bin := func(b string) string { return filepath.Join(n.opts.BinDir, b) }
	logf := func(name string) string { return filepath.Join(n.LogDir, name+".log") }
	p := n.pki.path
	n.Etcd = &Proc{Name: "etcd", Path: n.opts.Etcd, Log: logf("etcd"), Args: []string{
		"--name", "default", "--data-dir", n.path("etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "default=http://127.0.0.1:2380",
	}}
	n.APIServer = &Proc{Name: "kube-apiserver", Path: bin("kube-apiserver"), Log: logf("kube-apiserver"), Args: []string{
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", "0.0.0.0", "--advertise-address", n.APIServerHost(), "--secure-port", fmt.Sprint(APIServerPort),
		"--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
		"--client-ca-file", p("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
		"--authorization-mode", "Node,RBAC", "--token-auth-file", p("tokens.csv"),
		"--enable-admission-plugins", "NodeRestriction",
		"--service-cluster-ip-range", ServiceCIDR, "--allow-privileged=true",
		"--kubelet-client-certificate", p("apiserver-kubelet-client.crt"),
		"--kubelet-client-key", p("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP",
	}}
	n.ControllerManager = &Proc{Name: "kube-controller-manager", Path: bin("kube-controller-manager"), Log: logf("kube-controller-manager"), Args: []string{
		"--kubeconfig", p("controller-manager.kubeconfig"), "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "10257",
		"--service-account-private-key-file", p("sa.key"), "--root-ca-file", p("ca.crt"),
		// Each controller under its own ServiceAccount, whose bootstrap
		// roles grant what it needs (as kubeadm runs it).
		"--use-service-account-credentials=true",
	}}
	n.Scheduler = &Proc{Name: "kube-scheduler", Path: bin("kube-scheduler"), Log: logf("kube-scheduler"), Args: []string{
		"--kubeconfig", p("scheduler.kubeconfig"), "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "10259",
	}}
	if gates := n.featureGates(); gates != "" {
		for _, proc := range []*Proc{n.APIServer, n.ControllerManager, n.Scheduler} {
			proc.Args = append(proc.Args, gates)
		}
	}
	if n.opts.RuntimeConfig != "" {
		n.APIServer.Args = append(n.APIServer.Args, "--runtime-config="+n.opts.RuntimeConfig)
	}
}

// featureGates is the --feature-gates flag of Options.FeatureGates, ""
// for none.
func (n *Node) featureGates() string {
	if len(n.opts.FeatureGates) == 0 {
		return ""
	}
	on := make([]string, len(n.opts.FeatureGates))
	for i, g := range n.opts.FeatureGates {
		on[i] = g + "=true"
	}
	return "--feature-gates=" + strings.Join(on, ",")
}

// makeNodeProcs makes the Procs of containerd and the kubelet, with the
// paths their own process sees.
func (n *Node) makeNodeProcs() {
	bin := func(b string) string { return filepath.Join(n.opts.BinDir, b) }
	logf := func(name string) string { return filepath.Join(n.logDir(), name+".log") }
	n.Containerd = &Proc{Name: "containerd", Path: bin("containerd"), Log: logf("containerd"),
		Args: []string{"--config", n.path("containerd/config.toml")},
		// The shim is found on PATH: the one built beside containerd first.
		Env: []string{"PATH=" + n.opts.BinDir + ":" + os.Getenv("PATH")},
	}
	n.Kubelet = &Proc{Name: "kubelet", Path: bin("kubelet"), Log: logf("kubelet"), Args: []string{
		"--config", n.path("kubelet-config.yaml"), "--kubeconfig", n.kubeletKubeconfig(),
		"--root-dir", kubeletRoot, "--hostname-override", n.Name, "--node-ip", n.IP, "--v", "2",
	}}
	if gates := n.featureGates(); gates != "" {
		n.Kubelet.Args = append(n.Kubelet.Args, gates)
	}
}

func (n *Node) startEtcd(ctx context.Context) error {
	if err := n.Etcd.Start(); err != nil {
		return err
	}
	return n.waitHTTP(ctx, n.Etcd, "http://127.0.0.1:2379/health", "", `"health":"true"`)
}

func (n *Node) startAPIServer(ctx context.Context) error {
	if err := n.APIServer.Start(); err != nil {
		return err
	}
	return n.waitHTTP(ctx, n.APIServer, fmt.Sprintf("https://127.0.0.1:%d/readyz", APIServerPort), n.pki.tokens["admin"], "ok")
}

func (n *Node) startContainerd(ctx context.Context) error {
	if err := n.Containerd.Start(); err != nil {
		return err
	}
	return n.waitContainerd(ctx, n.Containerd)
}

// RestartContainerd stops the node's containerd (SIGTERM, then SIGKILL
// after 30 s), writes its configuration with NRI enabled or disabled
// (nri), starts it again and waits until it answers: a runtime whose NRI
// an admin turned off, or on again. Running containers keep running; the
// kubelet may take a moment more to see the node Ready (WaitNodeReady).
// Start's node only: a node of a cluster runs containerd in namespaces of
// its own.
func (n *Node) RestartContainerd(ctx context.Context, nri bool) error {
	if n.Containerd == nil {
		return errors.New("node: RestartContainerd on a node of a cluster")
	}
	if err := n.Containerd.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		return err
	}
	n.nriOff = !nri
	if err := writeFiles(map[string]string{n.HostPath(n.path("containerd/config.toml")): n.containerdConfig()}); err != nil {
		return err
	}
	return n.startContainerd(ctx)
}

// waitContainerd waits until the node's containerd answers, or proc
// (the process that runs it) exits.
func (n *Node) waitContainerd(ctx context.Context, proc *Proc) error {
	return n.waitFor(ctx, proc, "containerd answering", func(ctx context.Context) (bool, error) {
		return n.Ctr(ctx, "version") == nil, nil
	})
}

func (n *Node) startControlPlane(ctx context.Context) error {
	if err := n.ControllerManager.Start(); err != nil {
		return err
	}
	return n.Scheduler.Start()
}

func (n *Node) startKubelet(ctx context.Context) error {
	if err := n.Kubelet.Start(); err != nil {
		return err
	}
	return n.waitRegistered(ctx)
}

// waitRegistered waits until the node is Ready and the default
// ServiceAccount exists.
func (n *Node) waitRegistered(ctx context.Context) error {
	if err := n.WaitNodeReady(ctx); err != nil {
		return err
	}
	return n.waitFor(ctx, n.ControllerManager, "the default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := n.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	})
}

// WaitNodeReady waits until the node is Ready and carries no
// not-ready taint (the controller-manager removes it).
func (n *Node) WaitNodeReady(ctx context.Context) error {
	return n.waitFor(ctx, n.nodeProc(), "node "+n.Name+" Ready", func(ctx context.Context) (bool, error) {
		node, err := n.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady {
				return false, nil
			}
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// Ctr runs containerd's ctr against the node's containerd in the k8s.io
// namespace.
func (n *Node) Ctr(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(n.opts.BinDir, "ctr"), append([]string{"--address", n.ContainerdSocket, "--namespace", "k8s.io"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// waitFor polls cond every 200 ms until it holds, ctx ends, or proc (the
// component that should make it hold) exits; the error then carries the
// end of proc's log.
func (n *Node) waitFor(ctx context.Context, proc *Proc, what string, cond wait.ConditionWithContextFunc) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if proc != nil && isClosed(proc.done) {
			return false, proc.Err()
		}
		ok, err := cond(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		tail := ""
		if proc != nil {
			tail = "\n--- " + proc.Log + " (end):\n" + proc.Tail(25)
		}
		return fmt.Errorf("waiting for %s: %w (last: %v)%s", what, err, last, tail)
	}
	return nil
}

func (n *Node) waitHTTP(ctx context.Context, proc *Proc, url, token, want string) error {
	pool := x509.NewCertPool()
	pool.AddCert(n.pki.caCert)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return n.waitFor(ctx, proc, url, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			return false, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		return true, nil
	})
}

// nodeProc is the process that runs the node's kubelet: the kubelet,
// or the init of a cluster node's namespaces.
func (n *Node) nodeProc() *Proc {
	if n.worker != nil {
		return n.worker.proc
	}
	return n.Kubelet
}

// Stop stops the components, the kubelet first and etcd last. Containers
// keep running until the node's init exits, which ends its PID namespace.
// On a node of a cluster it stops that node alone: its init stops its
// kubelet and containerd and exits, and every process of the node, its
// pods' included, ends with it (Cluster.Stop stops the control plane).
func (n *Node) Stop() {
	if n.worker != nil {
		n.worker.stop()
		return
	}
	for _, p := range []*Proc{n.Kubelet, n.Scheduler, n.ControllerManager, n.APIServer, n.Containerd, n.Etcd} {
		if p != nil {
			_ = p.Stop(syscall.SIGTERM, 15*time.Second)
		}
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// KubeletMetric sums the samples of one metric on the kubelet's /metrics
// (its HTTPS port, with the API server's client certificate).
func (n *Node) KubeletMetric(ctx context.Context, name string) (float64, error) {
	cert, err := tls.LoadX509KeyPair(n.pki.path("apiserver-kubelet-client.crt"), n.pki.path("apiserver-kubelet-client.key"))
	if err != nil {
		return 0, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(n.pki.caCert)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s:10250/metrics", n.IP), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("kubelet /metrics: %s", resp.Status)
	}
	var sum float64
	for line := range strings.Lines(string(body)) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("kubelet metric %s: %w", name, err)
		}
		sum += v
	}
	return sum, nil
}
