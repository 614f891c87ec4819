package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// A cluster of several nodes (StartCluster): this process's namespaces
// run the control plane, on the address ControlPlaneIP of the bridge
// ClusterBridge; each node runs its containerd and kubelet (and, through
// them, its pods and the agent) under an init of its own PID, mount and
// network namespaces, a child of this process. Each node's link is a veth
// pair whose peer is a port of the bridge, so the nodes reach the control
// plane and each other, and this process routes each node's pod range to
// it.
const (
	// ControlPlaneIP is the API server's address in a cluster.
	ControlPlaneIP = "10.200.0.1"
	// ClusterBridge is the bridge of the cluster's network, in this
	// process's network namespace.
	ClusterBridge = "rnbr0"
	// workerEnv carries a node's workerSpec to its init; its presence
	// marks that run of the program.
	workerEnv = "SLINGSHOT_REAL_NODE_WORKER"
)

// NodeSpec is what differs between the nodes of a cluster beyond their
// names and addresses, which StartCluster chooses.
type NodeSpec struct {
	// HSNNetdevs are made in the node's own network namespace, as
	// Options.HSNNetdevs.
	HSNNetdevs []string
}

// Cluster is a control plane and its nodes, each a Node of its own.
type Cluster struct {
	// Nodes are the cluster's nodes (ClusterNodeName): each shares the
	// control plane's Procs, Kubeconfig, Config and Client, and has its
	// own name, address, pod range, root and processes.
	Nodes []*Node
	cp    *Node
}

// ClusterNodeName is the name of node i (from 0) of a cluster.
func ClusterNodeName(i int) string { return fmt.Sprintf("node-%d", i+1) }

// ClusterNodeRoot is where the node named name of a cluster under root
// keeps its files, as this process finds them: the node's own processes
// see them at one path that is the same on every node (Node.NodePath).
func ClusterNodeRoot(root, name string) string { return filepath.Join(root, "nodes", name) }

// clusterNodeView is where each node of a cluster under root sees its
// own root: an empty directory in this process's mount namespace, a bind
// of ClusterNodeRoot in each node's.
func clusterNodeView(root string) string { return filepath.Join(root, "node") }

// clusterNodeIP and clusterPodCIDR are node i's address and pod range.
func clusterNodeIP(i int) string         { return fmt.Sprintf("10.200.0.%d", 11+i) }
func clusterPodCIDR(i int) string        { return fmt.Sprintf("10.88.%d.0/24", i+1) }
func clusterHostLink(name string) string { return "rn-" + name }

// StartCluster brings up a control plane in the calling process's
// namespaces, which must be the ones [Enter] made (etcd, the API server,
// the controller-manager and the scheduler), and one node for each of
// nodes, each in namespaces of its own (see ClusterBridge); it waits until
// every node is Ready and the default ServiceAccount exists. The program
// must call RunWorker when IsWorker, before anything else: each node's
// init is this program run again. On error what was started is stopped.
func StartCluster(ctx context.Context, o Options, nodes []NodeSpec) (_ *Cluster, err error) {
	if os.Getpid() != 1 {
		return nil, errors.New("node.StartCluster: not the init of its own PID namespace; run it under node.Enter")
	}
	if len(nodes) == 0 {
		return nil, errors.New("node.StartCluster: no nodes")
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("node.StartCluster: this program, to run each node's init: %w", err)
	}
	cpo := o
	cpo.NodeName, cpo.NodeIP, cpo.HSNNetdevs = "", ControlPlaneIP, nil
	cp := newNode(cpo, o.Root)
	cp.apiHost = ControlPlaneIP
	cp.Kubeconfig = filepath.Join(o.Root, "admin.kubeconfig")
	c := &Cluster{cp: cp}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := os.MkdirAll(cp.LogDir, 0o755); err != nil {
		return nil, err
	}
	if err := privateTmpfs(); err != nil {
		return nil, fmt.Errorf("control plane mounts: %w", err)
	}
	if err := os.MkdirAll(clusterNodeView(o.Root), 0o755); err != nil {
		return nil, err
	}
	if err := runIP([][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "name", ClusterBridge, "type", "bridge"},
		{"addr", "add", ControlPlaneIP + "/24", "dev", ClusterBridge},
		{"link", "set", ClusterBridge, "up"},
	}); err != nil {
		return nil, fmt.Errorf("cluster network: %w", err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return nil, err
	}
	var ids []pkiNode
	for i, spec := range nodes {
		name := ClusterNodeName(i)
		no := o
		no.NodeName, no.NodeIP, no.PodCIDR = name, clusterNodeIP(i), clusterPodCIDR(i)
		no.HSNNetdevs = spec.HSNNetdevs
		no.Root = clusterNodeView(o.Root)
		// Under this process's root's logs, which Enter keeps when the run
		// fails, and outside the node's view: the same path everywhere.
		no.logDir = filepath.Join(cp.LogDir, name)
		no.cgroupRoot = "/" + filepath.Base(o.Root) + "-" + name
		n := newNode(no, ClusterNodeRoot(o.Root, name))
		n.apiHost = ControlPlaneIP
		n.Kubeconfig = cp.Kubeconfig
		n.worker = &worker{n: n, exe: exe}
		c.Nodes = append(c.Nodes, n)
		ids = append(ids, pkiNode{name, net.ParseIP(n.IP)})
	}
	p, err := newPKI(filepath.Join(o.Root, "pki"), []net.IP{net.ParseIP(ControlPlaneIP), net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}, ids)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	cp.pki = p
	if err := cp.writeControlPlaneConfigs(); err != nil {
		return nil, err
	}
	cp.makeControlPlaneProcs()
	for _, n := range c.Nodes {
		n.pki = p
		n.Config, n.Client = cp.Config, cp.Client
		n.Etcd, n.APIServer, n.ControllerManager, n.Scheduler = cp.Etcd, cp.APIServer, cp.ControllerManager, cp.Scheduler
		if err := n.makeDirs(); err != nil {
			return nil, err
		}
		if err := n.writeNodeConfigs(); err != nil {
			return nil, err
		}
	}
	err = runSteps(ctx, o.Ready, func(name string, took time.Duration) {
		cp.logf("cluster: %s up in %s", name, took.Round(time.Millisecond))
	}, []step{
		{"etcd", cp.startEtcd},
		{"kube-apiserver", cp.startAPIServer},
		{"controller-manager and scheduler", cp.startControlPlane},
		{"nodes", c.startNodes},
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// startNodes starts every node's init, routes each node's pod range to
// it, and waits until every node's containerd answers and every node is
// Ready: the nodes come up side by side.
func (c *Cluster) startNodes(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := n.worker.start(); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if err := runIP([][]string{{"route", "add", n.PodCIDR, "via", n.IP, "dev", ClusterBridge}}); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	for _, n := range c.Nodes {
		if err := n.waitContainerd(ctx, n.worker.proc); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if err := n.waitRegistered(ctx); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}

// Stop stops every node (side by side), then the control plane, and
// removes the nodes' cgroup roots. Stopping what is stopped does nothing.
func (c *Cluster) Stop() {
	if c == nil {
		return
	}
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		if n.worker != nil {
			wg.Go(n.worker.stop)
		}
	}
	wg.Wait()
	for _, p := range []*Proc{c.cp.Scheduler, c.cp.ControllerManager, c.cp.APIServer, c.cp.Etcd} {
		if p != nil {
			_ = p.Stop(syscall.SIGTERM, 15*time.Second)
		}
	}
}

// worker is the init of a cluster node's namespaces, seen from the
// control plane's process.
type worker struct {
	n    *Node
	exe  string
	mu   sync.Mutex
	proc *Proc
}

// workerSpec is what a node's init is told, through workerEnv: the Node's
// options as its own processes see them.
type workerSpec struct {
	Name, IP, PodCIDR, Gateway  string
	Root, HostRoot, LogDir      string
	BinDir, Runc, CNIBinDir     string
	PKIDir, APIHost, CgroupRoot string
	HSNNetdevs                  []string
	FeatureGates                []string
	Ready                       time.Duration
}

// start makes the node's cgroup root and starts its init in namespaces
// of its own; moves one end of a veth pair into the init's network
// namespace as node0, the other a port of ClusterBridge; and then lets
// the init go on (a line on its descriptor 3), which sets up its mounts
// and network and starts containerd and the kubelet.
func (w *worker) start() (err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.n
	if err := makeCgroupRoot(n.opts.cgroupRoot); err != nil {
		return err
	}
	spec, err := json.Marshal(workerSpec{
		Name: n.Name, IP: n.IP, PodCIDR: n.PodCIDR, Gateway: ControlPlaneIP,
		Root: n.opts.Root, HostRoot: n.hostRoot, LogDir: n.opts.logDir,
		BinDir: n.opts.BinDir, Runc: n.opts.Runc, CNIBinDir: n.opts.CNIBinDir,
		PKIDir: n.pki.dir, APIHost: n.apiHost, CgroupRoot: n.opts.cgroupRoot,
		HSNNetdevs: n.opts.HSNNetdevs, FeatureGates: n.opts.FeatureGates, Ready: n.opts.Ready,
	})
	if err != nil {
		return err
	}
	r, goLine, err := os.Pipe()
	if err != nil {
		return err
	}
	defer goLine.Close()
	w.proc = &Proc{
		Name: n.Name + " init", Path: w.exe, Args: os.Args[1:], Log: filepath.Join(n.LogDir, "init.log"),
		Env:        []string{workerEnv + "=" + string(spec)},
		Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET,
		ExtraFiles: []*os.File{r},
	}
	err = w.proc.Start()
	r.Close()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = w.proc.Stop(syscall.SIGKILL, time.Second)
		}
	}()
	link := clusterHostLink(n.Name)
	if err := runIP([][]string{
		{"link", "add", "name", link, "type", "veth", "peer", "name", "node0", "netns", fmt.Sprint(w.proc.Pid())},
		{"link", "set", link, "master", ClusterBridge},
		{"link", "set", link, "up"},
	}); err != nil {
		return err
	}
	if _, err := goLine.WriteString("go\n"); err != nil {
		return fmt.Errorf("node %s init: %w\n%s", n.Name, err, w.proc.Tail(20))
	}
	return nil
}

// stop stops the node's init, which stops its kubelet and containerd;
// every process of its PID namespace ends with it. Then its cgroup root
// goes.
func (w *worker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.proc != nil {
		_ = w.proc.Stop(syscall.SIGTERM, 45*time.Second)
	}
	if err := removeCgroupRoot(w.n.opts.cgroupRoot); err != nil {
		w.n.logf("node %s: %v", w.n.Name, err)
	}
}

// InitPID is the PID, in this process's PID namespace, of the init of the
// node's namespaces: this process (1) for Start's node, the node's own
// init for a node of a cluster, 0 while that does not run. Its
// /proc/PID/ns/net is the node's network namespace, /proc/PID/ns/pid its
// PID namespace.
func (n *Node) InitPID() int {
	if n.worker == nil {
		return os.Getpid()
	}
	n.worker.mu.Lock()
	defer n.worker.mu.Unlock()
	if n.worker.proc == nil {
		return 0
	}
	return n.worker.proc.Pid()
}

// IsWorker reports whether this program runs as the init of a cluster
// node's namespaces; then it must call RunWorker and nothing else.
func IsWorker() bool { return os.Getenv(workerEnv) != "" && os.Getpid() == 1 }

// RunWorker runs this program as the init of a cluster node's namespaces
// (StartCluster started it): its mounts and network, then containerd and
// the kubelet until SIGTERM, which stops them. It returns the exit code.
func RunWorker() int {
	// The init receives only the signals it handles: first thing.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var s workerSpec
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &s); err != nil {
		fmt.Fprintf(os.Stderr, "node init: %s: %v\n", workerEnv, err)
		return 1
	}
	if err := runWorker(ctx, s); err != nil {
		fmt.Fprintf(os.Stderr, "node %s init: %v\n", s.Name, err)
		return 1
	}
	return 0
}

func runWorker(ctx context.Context, s workerSpec) error {
	// The cluster writes its line once the node's link is in place; EOF
	// means it gave up on this node.
	line, err := bufio.NewReader(os.NewFile(3, "start")).ReadString('\n')
	if err != nil || line != "go\n" {
		return fmt.Errorf("waiting for the cluster's go: %q, %v", line, err)
	}
	if err := workerMounts(s); err != nil {
		return fmt.Errorf("mounts: %w", err)
	}
	if err := setupNetwork(s.IP, s.HSNNetdevs, s.Gateway); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	o := Options{
		Root: s.Root, BinDir: s.BinDir, Runc: s.Runc, CNIBinDir: s.CNIBinDir,
		NodeName: s.Name, NodeIP: s.IP, PodCIDR: s.PodCIDR, HSNNetdevs: s.HSNNetdevs, FeatureGates: s.FeatureGates, Ready: s.Ready,
		cgroupRoot: s.CgroupRoot, logDir: s.LogDir,
		Logf: func(format string, args ...any) { fmt.Printf(format+"\n", args...) },
	}
	// Inside, the node's root is where it sees it.
	n := newNode(o, s.Root)
	n.pki = &pki{dir: s.PKIDir}
	n.apiHost = s.APIHost
	n.makeNodeProcs()
	defer func() {
		for _, p := range []*Proc{n.Kubelet, n.Containerd} {
			_ = p.Stop(syscall.SIGTERM, 15*time.Second)
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, s.Ready)
	defer cancel()
	if err := n.startContainerd(sctx); err != nil {
		return err
	}
	if err := n.Kubelet.Start(); err != nil {
		return err
	}
	n.logf("node %s: containerd and kubelet started", s.Name)
	<-ctx.Done()
	n.logf("node %s: stopping", s.Name)
	return nil
}

// workerMounts gives the node's init its own /proc (of its PID
// namespace), /var/lib, /var/log and /run, its root at s.Root and the
// kubelet's root directory.
func workerMounts(s workerSpec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := privateTmpfs(); err != nil {
		return err
	}
	if err := unix.Mount(s.HostRoot, s.Root, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", s.HostRoot, s.Root, err)
	}
	if err := os.MkdirAll(kubeletRoot, 0o755); err != nil {
		return err
	}
	kubelet := filepath.Join(s.Root, "kubelet")
	if err := unix.Mount(kubelet, kubeletRoot, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", kubelet, kubeletRoot, err)
	}
	return nil
}

// cgroupMounts are the cgroup hierarchies a kubelet's cgroup root must
// exist in: every v1 hierarchy under /sys/fs/cgroup (the CI machine's
// hybrid layout), or the one v2 hierarchy.
func cgroupMounts() ([]string, error) {
	const base = "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err == nil {
		return []string{base}, nil
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(base, e.Name()))
		}
	}
	return out, nil
}

// makeCgroupRoot makes the cgroup name in every hierarchy: the kubelet
// refuses a cgroup root that does not exist. A v1 cpuset cgroup admits
// no process until it has CPUs and memory nodes: its parent's.
func makeCgroupRoot(name string) error {
	if name == "" {
		return nil
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return fmt.Errorf("cgroup root %s: %w", name, err)
	}
	for _, m := range mounts {
		dir := filepath.Join(m, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup root: %w", err)
		}
		if filepath.Base(m) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(m, f))
			if err != nil {
				return fmt.Errorf("cgroup root: %w", err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				return fmt.Errorf("cgroup root: %w", err)
			}
		}
	}
	return nil
}

// removeCgroupRoot removes the cgroup name and every cgroup below it, in
// every hierarchy, once their processes are gone: the node's init has
// exited, but the kernel may still be ending the processes of its PID
// namespace, so a busy cgroup is tried again for a while.
func removeCgroupRoot(name string) error {
	if name == "" {
		return nil
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	// About 20 s in all.
	var last error
	err = wait.ExponentialBackoff(wait.Backoff{Duration: 50 * time.Millisecond, Factor: 1.5, Cap: 2 * time.Second, Steps: 20}, func() (bool, error) {
		last = nil
		for _, m := range mounts {
			if err := removeCgroupTree(filepath.Join(m, name)); err != nil {
				last = err
			}
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("remove cgroup root %s: %w (last: %v)", name, err, last)
	}
	return nil
}

// removeCgroupTree removes the cgroup dir and its descendants, deepest
// first: a cgroup directory goes by rmdir, its control files with it.
func removeCgroupTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("rmdir %s: %w", d, err)
		}
	}
	return nil
}
