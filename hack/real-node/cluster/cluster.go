// Package cluster sets up the project on a real node for its end-to-end
// tests and for demo-node: it builds the static binaries and their images,
// writes a mock sysfs tree whose /dev/cxiN are real character devices,
// starts the node (package node), imports the images into its containerd
// and installs the Helm chart with the development values that let the
// agent run the simulated driver there.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/hack/real-node/images"
	"github.com/slingshot-k8s/slingshot/hack/real-node/install"
	"github.com/slingshot-k8s/slingshot/hack/real-node/node"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// Image references the chart and the tests use; pulled never.
const (
	Registry      = "ghcr.io/slingshot-k8s"
	Tag           = "e2e"
	WorkloadImage = "localhost/slingshot-e2e/workload:1"
	Namespace     = "slingshot-system"
	ReleaseName   = "slingshot"
	Resource      = "hpe.com/cxi"
	AgentPort     = 9479
	InspectPort   = 9480
	GRPCPort      = 9440
	// IPPool is the controller's IP pool of the hsn interfaces
	// (Options.HSNInterface): /24 slices of IPPoolPrefix.
	IPPool       = "hsn0"
	IPPoolPrefix = "10.150.0.0/16"
	IPSliceBits  = 24
	// HSNInterface is the name of the pods' hsn interface.
	HSNInterface = "hsn0"
	// cxiMajor is the character-device major of the mock /dev/cxiN, the
	// one the mock sysfs tree's cxi_user class names.
	cxiMajor = 508
)

// Options configure [Setup].
type Options struct {
	// Root is the node's root directory (node.Inside).
	Root string
	// RepoDir is the project's checkout; default: found above the working
	// directory.
	RepoDir string
	// BinDir holds the node's programs (make real-node-bin); default
	// $REAL_NODE_BIN, else hack/real-node/bin of RepoDir.
	BinDir string
	// NICs on the mock node (default 2) and device-plugin shares of each
	// (default 16, so that a burst of 30 one-NIC pods fits).
	NICs, SharesPerNIC int
	// Nodes is the number of nodes (default 1). One node runs beside the
	// control plane, in the namespaces of this process (node.Start); more
	// run each in namespaces of its own (node.StartCluster), each with its
	// own mock machine, and the controller on the first.
	Nodes int
	// HSNInterface turns on the agent's hsn interface for the NIC
	// resource (agent.hsnInterface, macvlan) with the controller's IP
	// pool IPPool. The hsn netdevs the mock NICs name exist in the node's
	// network namespace either way (node.Options.HSNNetdevs).
	HSNInterface bool
	// HSNAllNICs, with HSNInterface, gives a pod an interface on every NIC
	// it holds (agent.hsnInterface.allNICs); HSNRailPools gives each
	// netdev's interfaces a pool of its own (RailPool,
	// agent.hsnInterface.poolByNetdev), else all come from IPPool.
	HSNAllNICs, HSNRailPools bool
	// API is the agent's front end, APIDevicePlugin (default) or APIDRA:
	// the chart's api value (dra.go).
	API string
	// PinNetns runs the agent privileged, as the chart's production
	// default does: the chart then passes --pin-netns and mounts the state
	// directory with Bidirectional propagation, so that the agent's
	// namespace pins (agent/netns/pin) outlive its container. Setup makes
	// the state directory a shared mount of the node's mount namespace
	// first, as the runtime requires for Bidirectional. One node only.
	PinNetns bool
	// Values are merged over the chart values Setup sets.
	Values map[string]any
	// AgentArgs are added to the agent's command line (agent.extraArgs).
	AgentArgs []string
	// Secrets are made in Namespace before the chart is installed: those
	// the values name (controller.hwcoll.oauthSecret).
	Secrets []*corev1.Secret
	// Baseline is a commit of the repository's history (a release): Build
	// builds it too (BuildBaseline) and Setup imports its images beside
	// HEAD's, as Env.Baseline. InstallBaseline installs its chart and
	// images instead of HEAD's.
	Baseline        string
	InstallBaseline bool
	// ControllerVolume keeps the controller's sqlite database on a
	// PersistentVolume of the node (a directory under its root), as a
	// site's volume keeps it through the controller's replacements
	// (upgrades, rollbacks); without it, an emptyDir that ends with the
	// pod.
	ControllerVolume bool
	// FeatureGates are Kubernetes feature gates turned on in every
	// component, and RuntimeConfig the API server's --runtime-config
	// (node.Options).
	FeatureGates  []string
	RuntimeConfig string
	Logf          func(format string, args ...any)
}

// Env is the running node with the project installed. With several nodes
// (Options.Nodes) each node has an Env of its own (Nodes), the same but
// for the node's fields (Node, Machine, the agent's URLs and paths,
// Capacity); the first node's is the one Setup returns.
type Env struct {
	Node    *node.Node
	Release *install.Release
	Machine *mocksysfs.Truth
	// Head is the working tree's build, Baseline the build of
	// Options.Baseline (nil without one): their charts and images.
	Head, Baseline *Source
	// AgentURL is the agent's HTTP endpoint (host network, node address);
	// InspectURL its /inspect endpoint, on the node's loopback, which this
	// program shares as the node's init; ControllerAddr the controller's
	// gRPC address.
	AgentURL, InspectURL, ControllerAddr string
	// Capacity is the node's hpe.com/cxi allocatable (device-plugin
	// mode; 0 with DRA).
	Capacity int
	// StateDir is the agent's state directory, SimStateDir the simulated
	// driver's state in it.
	StateDir, SimStateDir string
	// IPAMSocket is the agent's IPAM socket and CNIBinDir the directory
	// its init container installs slingshot-ipam into: the chart's
	// ipam.socket and ipam.cniBinDir, under the node's root.
	IPAMSocket, CNIBinDir string
	// Every path above is where this process finds it; the node's own
	// processes (and the chart values) see it at Node.NodePath of it.
	opts Options
	// nodes are every node's Env, this one's among them; cluster is the
	// control plane and nodes of a cluster of several, nil for one node.
	nodes   []*Env
	cluster *node.Cluster
	// chartDRA says whether the chart has the api value and the dra
	// block, at draValues in its values.
	chartDRA  bool
	draValues []string
}

func (o *Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// Build builds the static binaries the images are made of into
// root/bin: the agent, the controller and slingshot-ipam (in the agent's
// image, as the Dockerfile puts it) from the project, the sandbox's
// pause and the test workload from this module; with Options.Baseline,
// the baseline's too (BuildBaseline, into root/baseline). It needs the
// module proxy (or a warm module cache), so it runs before the node's
// namespaces, which have no network.
func Build(ctx context.Context, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	bin := filepath.Join(o.Root, "bin")
	start := time.Now()
	if err := images.BuildStaticLD(ctx, o.RepoDir, bin, commitLDFlags(ctx, o.RepoDir), projectCommands...); err != nil {
		return err
	}
	if err := images.BuildStatic(ctx, filepath.Join(o.RepoDir, "hack/real-node"), bin, "./cmd/pause", "./cmd/workload"); err != nil {
		return err
	}
	o.logf("cluster: binaries built in %s", time.Since(start).Round(time.Millisecond))
	if o.Baseline != "" {
		start = time.Now()
		if err := BuildBaseline(ctx, o.RepoDir, o.Baseline, filepath.Join(o.Root, baselineDir)); err != nil {
			return err
		}
		o.logf("cluster: baseline %s built from the repository's history in %s", o.Baseline, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// Setup does everything in the package comment but [Build] and waits until the
// controller and the agent are ready and the node advertises the NICs.
// On error, what was started is returned for Stop, or nil.
func Setup(ctx context.Context, o Options) (*Env, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	binOut := filepath.Join(o.Root, "bin")
	chartDir := filepath.Join(o.RepoDir, "deploy/helm/slingshot")
	head, err := loadSource(ctx, "HEAD", binOut, chartDir, Tag)
	if err != nil {
		return nil, err
	}
	var baseline *Source
	if o.Baseline != "" {
		dir := filepath.Join(o.Root, baselineDir)
		if baseline, err = loadSource(ctx, "baseline", filepath.Join(dir, "bin"), filepath.Join(dir, "chart"), ""); err != nil {
			return nil, fmt.Errorf("%w (did Build build the baseline %s?)", err, o.Baseline)
		}
		baseline.Name = fmt.Sprintf("baseline %s (%.7s)", baseline.Version, baseline.Commit)
		if baseline.Tag == head.Tag {
			return nil, fmt.Errorf("cluster: the baseline's images would have HEAD's tag %q", head.Tag)
		}
	} else if o.InstallBaseline {
		return nil, errors.New("cluster: InstallBaseline without a Baseline")
	}
	o.logf("cluster: HEAD is %s, commit %s", head.Version, head.Commit)
	if baseline != nil {
		o.logf("cluster: the baseline is %s, commit %s, its images tagged %s", baseline.Version, baseline.Commit, baseline.Tag)
		if baseline.Commit == head.Commit {
			o.logf("cluster: HEAD is the baseline's commit: its upgrades move between two builds of one source")
		}
	}
	e, err := startNodes(ctx, o)
	if err != nil {
		return e, err
	}
	for _, ne := range e.Nodes() {
		ne.Head, ne.Baseline = head, baseline
	}
	defaults, err := install.ChartValues(chartDir)
	if err != nil {
		return e, err
	}
	e.draValues, e.chartDRA = draChartValues(defaults)
	for _, ne := range e.nodes[1:] {
		ne.chartDRA, ne.draValues = e.chartDRA, e.draValues
	}
	if o.API == APIDRA && !e.chartDRA {
		return e, fmt.Errorf("cluster: the chart in %s has no api and dra values: it predates the agent's DRA front end", chartDir)
	}
	start := time.Now()
	for _, ne := range e.nodes {
		if err := ne.importImages(ctx, binOut); err != nil {
			return e, err
		}
	}
	o.logf("cluster: images imported in %s", time.Since(start).Round(time.Millisecond))
	if err := e.createSecrets(ctx); err != nil {
		return e, err
	}
	if o.PinNetns {
		if err := shareStateDir(e.StateDir); err != nil {
			return e, err
		}
	}
	if o.ControllerVolume {
		if err := e.createControllerVolume(ctx); err != nil {
			return e, err
		}
	}
	start = time.Now()
	first := head
	if o.InstallBaseline {
		first = baseline
	}
	e.Release = &install.Release{
		Kubeconfig: e.Node.Kubeconfig, ChartDir: first.ChartDir,
		Name: ReleaseName, Namespace: Namespace, Values: e.SourceValues(first, nil), Timeout: 5 * time.Minute,
	}
	if err := e.Release.Install(ctx); err != nil {
		return e, fmt.Errorf("%w\n%s", err, e.Describe(ctx))
	}
	for _, ne := range e.nodes[1:] {
		ne.Release = e.Release
	}
	// Helm's wait takes a DaemonSet of one pod with maxUnavailable 1 for
	// ready when none is: wait for the agent itself.
	if err := e.WaitDaemonSetReady(ctx, ReleaseName+"-agent"); err != nil {
		return e, err
	}
	for _, ne := range e.nodes {
		if o.API == APIDRA {
			if _, err := ne.WaitResourceSlices(ctx, ne.PhysicalNICs()); err != nil {
				return e, err
			}
			continue
		}
		if err := ne.WaitAllocatable(ctx, ne.Capacity); err != nil {
			return e, fmt.Errorf("%w\n%s", err, ne.Describe(ctx))
		}
	}
	if o.API == APIDRA {
		o.logf("cluster: chart installed (DRA; chart values: %v), %d NICs in the ResourceSlices of each of %d node(s), in %s", e.chartDRA, e.PhysicalNICs(), len(e.nodes), time.Since(start).Round(time.Millisecond))
		return e, nil
	}
	o.logf("cluster: chart of %s installed, %s=%d allocatable on each of %d node(s), in %s", first, Resource, e.Capacity, len(e.nodes), time.Since(start).Round(time.Millisecond))
	return e, nil
}

// startNodes writes each node's mock machine and starts the node, or the
// cluster of nodes, and returns the first node's Env (nil on error
// before anything started).
func startNodes(ctx context.Context, o Options) (*Env, error) {
	var roots []string // each node's root, as this process finds it
	var specs []node.NodeSpec
	var machines []*mocksysfs.Truth
	for i := range o.Nodes {
		root := o.Root
		if o.Nodes > 1 {
			root = node.ClusterNodeRoot(o.Root, node.ClusterNodeName(i))
		}
		// A seed of each node's own: the NICs' NIDs differ between nodes,
		// as on a fabric.
		machine, err := writeMachine(filepath.Join(root, "machine"), o.NICs, 7+int64(i))
		if err != nil {
			return nil, fmt.Errorf("mock machine: %w", err)
		}
		var hsn []string
		for _, nic := range machine.NICs {
			if nic.NetDev != "" {
				hsn = append(hsn, nic.NetDev)
			}
		}
		roots, machines = append(roots, root), append(machines, machine)
		specs = append(specs, node.NodeSpec{HSNNetdevs: hsn})
	}
	var nodes []*node.Node
	var c *node.Cluster
	if o.Nodes == 1 {
		n, err := node.Start(ctx, node.Options{Root: o.Root, BinDir: o.BinDir, HSNNetdevs: specs[0].HSNNetdevs, Logf: o.Logf,
			FeatureGates: o.FeatureGates, RuntimeConfig: o.RuntimeConfig})
		if err != nil {
			return nil, err
		}
		nodes = []*node.Node{n}
	} else {
		var err error
		if c, err = node.StartCluster(ctx, node.Options{Root: o.Root, BinDir: o.BinDir, Logf: o.Logf,
			FeatureGates: o.FeatureGates, RuntimeConfig: o.RuntimeConfig}, specs); err != nil {
			return nil, err
		}
		nodes = c.Nodes
	}
	var envs []*Env
	for i, n := range nodes {
		e := &Env{
			Node: n, Machine: machines[i], opts: o, cluster: c,
			AgentURL:   fmt.Sprintf("http://%s:%d", n.IP, AgentPort),
			InspectURL: fmt.Sprintf("http://127.0.0.1:%d", InspectPort),
			// The controller runs on the first node (values).
			ControllerAddr: fmt.Sprintf("%s:%d", nodes[0].IP, GRPCPort),
			IPAMSocket:     filepath.Join(roots[i], "ipam-run", "ipam.sock"),
			CNIBinDir:      filepath.Join(roots[i], "cni-bin"),
			StateDir:       filepath.Join(roots[i], "agent-state"),
		}
		e.SimStateDir = filepath.Join(e.StateDir, "cxi-sim")
		if o.API == APIDevicePlugin {
			e.Capacity = o.NICs * o.SharesPerNIC
		}
		envs = append(envs, e)
	}
	for _, e := range envs {
		e.nodes = envs
	}
	return envs[0], nil
}

// Nodes are every node's Env, the first node's first; one for a single
// node.
func (e *Env) Nodes() []*Env {
	if len(e.nodes) == 0 {
		return []*Env{e}
	}
	return e.nodes
}

func (o *Options) defaults() error {
	if o.Root == "" {
		return errors.New("cluster: Root is required")
	}
	if o.RepoDir == "" {
		dir, err := findRepo()
		if err != nil {
			return err
		}
		o.RepoDir = dir
	}
	if o.BinDir == "" {
		o.BinDir = os.Getenv("REAL_NODE_BIN")
	}
	if o.BinDir == "" {
		o.BinDir = filepath.Join(o.RepoDir, "hack/real-node/bin")
	}
	if o.NICs == 0 {
		o.NICs = 2
	}
	if o.SharesPerNIC == 0 {
		o.SharesPerNIC = 16
	}
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.PinNetns && o.Nodes > 1 {
		return errors.New("cluster: PinNetns needs one node: each node of a cluster has a mount namespace of its own, where its state directory would have to be shared")
	}
	switch o.API {
	case "":
		o.API = APIDevicePlugin
	case APIDevicePlugin, APIDRA:
	default:
		return fmt.Errorf("cluster: API %q: want %q or %q", o.API, APIDevicePlugin, APIDRA)
	}
	return nil
}

// findRepo walks up from the working directory to the project's go.mod.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/slingshot-k8s/slingshot\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cluster: the project's go.mod is not above the working directory; set RepoDir")
		}
		dir = parent
	}
}

// writeMachine writes a mock node's sysfs tree and turns its /dev/cxiN
// into character devices: containerd refuses a device spec whose host
// path is a regular file.
func writeMachine(dir string, nics int, seed int64) (*mocksysfs.Truth, error) {
	truth, err := mocksysfs.Write(dir, mocksysfs.Spec{NICs: nics, NUMANodes: 2, Seed: seed})
	if err != nil {
		return nil, err
	}
	for _, nic := range truth.NICs {
		p := filepath.Join(truth.DevRoot, nic.Name)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(cxiMajor, uint32(nic.Index)))); err != nil {
			return nil, fmt.Errorf("mknod %s: %w", p, err)
		}
	}
	return truth, nil
}

// shareStateDir makes the agent's state directory a mount point of its
// own with shared propagation, in the node's mount namespace (this
// process's): containerd refuses a Bidirectional mount whose source is not
// on a shared mount ("is not a shared mount"), and the node's namespaces
// were made with private propagation (node.Enter). The mount ends with
// the node's namespace.
func shareStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return nil
}

// importImages imports the node's images into its containerd: the
// sandbox's and the workload's (of bin), and the agent's and the
// controller's of HEAD and of the baseline, if any.
func (e *Env) importImages(ctx context.Context, bin string) error {
	specs := []images.Spec{
		{Ref: node.PauseImage, Files: map[string]string{"/pause": filepath.Join(bin, "pause")}, Entrypoint: []string{"/pause"}},
		{Ref: WorkloadImage, Files: map[string]string{"/workload": filepath.Join(bin, "workload")}, Entrypoint: []string{"/workload"}},
	}
	for _, src := range []*Source{e.Head, e.Baseline} {
		if src != nil {
			specs = append(specs, src.imageSpecs()...)
		}
	}
	dir := filepath.Join(e.opts.Root, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, s := range specs {
		tarball := filepath.Join(dir, strconv.Itoa(i)+".tar")
		if err := images.Build(s, tarball); err != nil {
			return err
		}
		if err := e.Node.Ctr(ctx, "images", "import", tarball); err != nil {
			return err
		}
	}
	return nil
}

// createSecrets makes the release's namespace and Options.Secrets in it;
// Helm's install takes the namespace as it finds it.
func (e *Env) createSecrets(ctx context.Context) error {
	if len(e.opts.Secrets) == 0 {
		return nil
	}
	c := e.Node.Client.CoreV1()
	if err := e.ensureNamespace(ctx); err != nil {
		return err
	}
	for _, sec := range e.opts.Secrets {
		if _, err := c.Secrets(Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("secret %s/%s: %w", Namespace, sec.Name, err)
		}
	}
	return nil
}

// imageSpecs are the source's agent and controller images, as the
// Dockerfile makes them: the agent as root, the controller as the nonroot
// user.
func (s *Source) imageSpecs() []images.Spec {
	return []images.Spec{
		{Ref: s.AgentImage(), Files: map[string]string{
			"/usr/local/bin/slingshot-agent": filepath.Join(s.bin, "slingshot-agent"),
			"/usr/local/bin/slingshot-ipam":  filepath.Join(s.bin, "slingshot-ipam"),
		},
			Entrypoint: []string{"/usr/local/bin/slingshot-agent"}, User: "0:0"},
		{Ref: s.ControllerImage(), Files: map[string]string{
			"/usr/local/bin/slingshot-controller": filepath.Join(s.bin, "slingshot-controller"),
			"/usr/local/bin/kubectl-slingshot":    filepath.Join(s.bin, "kubectl-slingshot"),
		},
			Entrypoint: []string{"/usr/local/bin/slingshot-controller"}, User: "65532:65532"},
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// SourceValues are the chart values that run src's images on the node
// (values), with over merged over them.
func (e *Env) SourceValues(src *Source, over map[string]any) map[string]any {
	v := e.values()
	v["image"].(map[string]any)["tag"] = src.Tag
	merge(v, over)
	return v
}

// values are the chart values of the real node: the production defaults
// but for what a node without Slingshot hardware, a registry, a storage
// provisioner, a Service proxy or cluster DNS needs (each commented).
func (e *Env) values() map[string]any {
	n := e.Node
	// Paths as the node's processes see them: the same on every node.
	at := n.NodePath
	controllerNode := e.Nodes()[0].Node
	v := map[string]any{
		// Images imported into containerd, never pulled.
		"image": map[string]any{"registry": Registry, "tag": Tag, "pullPolicy": "Never"},
		"agent": map[string]any{
			// The simulated driver on the mock tree (development values),
			// unprivileged but with PinNetns.
			"cxiDriver": "sim", "privileged": e.opts.PinNetns,
			"sysfsPath": at(e.Machine.SysRoot), "devPath": at(e.Machine.DevRoot),
			// Every host path under the node's root.
			"kubeletDir": at(n.KubeletDir), "cdiDir": at(n.CDIDir), "stateDir": at(e.StateDir),
			// No cluster DNS: the controller on the node's address.
			"controllerAddress": e.ControllerAddr,
			// The node's containerd socket is under its root, not at
			// containerd's default path.
			"extraArgs": append([]any{"--cri-socket=" + at(n.ContainerdSocket)}, toAny(e.opts.AgentArgs)...),
			"logLevel":  "debug",
			// Enough shares that a burst of one-NIC pods fits; the
			// rest of the agent's configuration is the chart's.
			"config": map[string]any{
				"nicResource": map[string]any{"name": Resource, "sharesPerNIC": e.opts.SharesPerNIC},
			},
		},
		"controller": map[string]any{
			// No storage provisioner: the database on an emptyDir.
			"persistence": map[string]any{"enabled": false},
			// No Service proxy: the node's network, and the API server
			// at its address.
			"hostNetwork": true,
			"extraEnv": []any{
				map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": n.APIServerHost()},
				map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": strconv.Itoa(node.APIServerPort)},
			},
			"quarantine": "30s",
			"logLevel":   "debug",
			// The agents dial the controller's node's address: the
			// certificate the chart makes (no cert-manager here) names it.
			"tls": map[string]any{"ipAddresses": []any{controllerNode.IP}},
		},
		// The IPAM socket's and the CNI bin dir's host paths under the
		// node's root, never the machine's /run or /opt/cni/bin; the init
		// container installs slingshot-ipam there from the agent image.
		"ipam": map[string]any{"socket": at(e.IPAMSocket), "cniBinDir": at(e.CNIBinDir), "installPlugin": true},
	}
	if len(e.Nodes()) > 1 {
		// On the first node, whose address the agents dial (ControllerAddr).
		v["controller"].(map[string]any)["nodeSelector"] = map[string]any{"kubernetes.io/hostname": controllerNode.Name}
	}
	if e.opts.HSNInterface {
		agent := v["agent"].(map[string]any)
		agent["hsnInterface"] = map[string]any{"enabled": true, "mode": "macvlan", "name": HSNInterface, "pool": IPPool}
		// Unprivileged, the agent gets CAP_NET_ADMIN from the chart with
		// the hsn interface on, which making the links needs.
		pools := []string{fmt.Sprintf("%s=%s:/%d", IPPool, IPPoolPrefix, IPSliceBits)}
		hsn := agent["hsnInterface"].(map[string]any)
		hsn["allNICs"] = e.opts.HSNAllNICs
		if e.opts.HSNRailPools {
			byNetdev := map[string]any{}
			for _, n := range e.Machine.NICs {
				name, prefix := RailPool(n.NetDev)
				if n.NetDev == "" || name == IPPool {
					continue
				}
				byNetdev[n.NetDev] = name
				pools = append(pools, fmt.Sprintf("%s=%s:/%d", name, prefix, IPSliceBits))
			}
			hsn["poolByNetdev"] = byNetdev
		}
		v["controller"].(map[string]any)["ipPools"] = strings.Join(pools, ",")
	}
	if e.opts.ControllerVolume {
		v["controller"].(map[string]any)["persistence"] = map[string]any{"enabled": true, "existingClaim": controllerClaim}
	}
	e.setAPIValues(v)
	merge(v, e.opts.Values)
	return v
}

// merge copies src over dst, recursing into maps.
func merge(dst, src map[string]any) {
	for k, sv := range src {
		if sm, ok := sv.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = sv
	}
}

// WaitAllocatable waits until the node advertises want of the resource.
func (e *Env) WaitAllocatable(ctx context.Context, want int) error {
	var got int64
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		nd, err := e.Node.Client.CoreV1().Nodes().Get(ctx, e.Node.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		q := nd.Status.Allocatable[corev1.ResourceName(Resource)]
		got = q.Value()
		return got == int64(want), nil
	})
	if err != nil {
		return fmt.Errorf("node allocatable %s = %d, want %d: %w", Resource, got, want, err)
	}
	return nil
}

// WaitDaemonSetReady waits until every pod of the DaemonSet is ready.
func (e *Env) WaitDaemonSetReady(ctx context.Context, name string) error {
	var st appsv1.DaemonSetStatus
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := e.Node.Client.AppsV1().DaemonSets(Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		st = ds.Status
		return st.DesiredNumberScheduled >= int32(len(e.Nodes())) && st.NumberReady == st.DesiredNumberScheduled && st.UpdatedNumberScheduled == st.DesiredNumberScheduled, nil
	})
	if err != nil {
		return fmt.Errorf("DaemonSet %s ready (%+v): %w\n%s", name, st, err, e.Describe(ctx))
	}
	return nil
}

// PluginPath is kubectl-slingshot as Build built it from the project
// (the kubectl plugin, which the controller's image carries too).
func (e *Env) PluginPath() string { return filepath.Join(e.opts.Root, "bin", "kubectl-slingshot") }

// KubectlPath is the kubectl built beside the node's components.
func (e *Env) KubectlPath() string { return filepath.Join(e.opts.BinDir, "kubectl") }

// Stop stops the node's components; with several nodes, every node and
// the control plane (Node.Stop stops one node alone).
func (e *Env) Stop() {
	switch {
	case e == nil:
	case e.cluster != nil:
		e.cluster.Stop()
	case e.Node != nil:
		e.Node.Stop()
	}
}
