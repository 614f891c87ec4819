// Package harness runs simulated Slingshot nodes for the end-to-end tests
// and the demo: a mock sysfs tree, the kubelet's own device manager and
// PodResources server, a proc tree holding pods' sandbox processes, and
// the slingshot-agent binary.
package harness

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/owner"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/hack/kubelet-e2e/kubelet"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// NICResource is the NIC resource's default name.
const NICResource = "hpe.com/cxi"

// AgentBin is the slingshot-agent binary [BuildAgent] built.
var AgentBin string

// BuildAgent builds the agent in the project's own module (with its own
// go.mod, as it ships) into dir and sets AgentBin. It carries the embedded
// controller (the embedded_controller tag): the node has no cluster
// controller.
func BuildAgent(dir string, race bool) error {
	return BuildAgentWith(dir, Build{Race: race})
}

// Build says how [BuildAgentWith] builds the agent.
type Build struct {
	Race bool // with the race detector
	// Shipped builds it as `make build` and the image do: static
	// (CGO_ENABLED=0), -trimpath, without symbol tables (-s -w).
	Shipped bool
	// NoEmbeddedController leaves out the embedded_controller tag, as
	// the image's default build does: the agent then needs the address
	// of a cluster controller (--controller).
	NoEmbeddedController bool
}

// BuildAgentWith builds the agent as b says into dir and sets AgentBin.
func BuildAgentWith(dir string, b Build) error {
	if b.Race && b.Shipped {
		return errors.New("build slingshot-agent: the race detector needs cgo, a shipped build has none")
	}
	AgentBin = filepath.Join(dir, "slingshot-agent")
	args := []string{"build", "-o", AgentBin}
	if !b.NoEmbeddedController {
		args = append(args, "-tags", "embedded_controller")
	}
	if b.Race {
		args = append(args, "-race")
	}
	if b.Shipped {
		args = append(args, "-trimpath", "-ldflags", "-s -w")
	}
	build := exec.Command("go", append(args, "./cmd/slingshot-agent")...)
	build.Dir = projectRoot()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if b.Shipped {
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if err := build.Run(); err != nil {
		return fmt.Errorf("build slingshot-agent: %w", err)
	}
	return nil
}

// projectRoot is the project's directory: two levels above this module.
func projectRoot() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/slingshot-k8s/slingshot/hack/kubelet-e2e").Output()
	if err != nil {
		return filepath.Join("..", "..")
	}
	return filepath.Join(strings.TrimSpace(string(out)), "..", "..")
}

// TB is what the harness needs of a test; TB is one, and the demo
// has its own.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	TempDir() string
	Cleanup(func())
	Failed() bool
	Context() context.Context
}

// Node is one simulated node: a mock sysfs tree, a kubelet directory, a
// proc tree for pods' network namespaces, and the agent's state.
type Node struct {
	t        TB
	Name     string
	Dir      string
	Truth    *mocksysfs.Truth
	KubeDir  string
	StateDir string
	ProcDir  string
	CDIDir   string
	Config   string // the agent's configuration file
	Kubelet  *kubelet.Kubelet

	procMu  sync.Mutex
	nextPID int // guarded by procMu
}

func NewNode(t TB, name string, nics, numa int) *Node {
	return NewNodeSpec(t, name, mocksysfs.Spec{NICs: nics, NUMANodes: numa, Seed: 7})
}

func NewNodeSpec(t TB, name string, spec mocksysfs.Spec) *Node {
	t.Helper()
	dir := t.TempDir()
	truth, err := mocksysfs.Write(filepath.Join(dir, "machine"), spec)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{
		t: t, Name: name, Dir: dir, Truth: truth,
		KubeDir:  filepath.Join(dir, "kubelet"),
		StateDir: filepath.Join(dir, "state"),
		ProcDir:  truth.ProcRoot, // the mock's NVIDIA driver files, and our pods' processes
		CDIDir:   filepath.Join(dir, "cdi"),
		Config:   filepath.Join(dir, "agent.yaml"),
		nextPID:  1000,
	}
	for _, d := range []string{n.KubeDir, n.StateDir, n.CDIDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.writeProc("1", "0::/init.scope\n", "/proc/self/ns/net") // the host: the harness's own
	cfg := fmt.Sprintf("podResources: {pollInterval: 100ms}\nhealth: {pollInterval: 100ms}\ncdi: {specDir: %s}\n", n.CDIDir)
	if err := os.WriteFile(n.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// writeProc adds a process to the node's proc tree: its cgroup, and its
// ns/net, a link to the real network namespace file nsFile, which the
// agent opens and holds as it would a pod's.
func (n *Node) writeProc(pid, cgroup, nsFile string) {
	n.t.Helper()
	if err := n.addProc(pid, cgroup, nsFile); err != nil {
		n.t.Fatal(err)
	}
}

func (n *Node) addProc(pid, cgroup, nsFile string) error {
	d := filepath.Join(n.ProcDir, pid)
	if err := os.MkdirAll(filepath.Join(d, "ns"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d, "cgroup"), []byte(cgroup), 0o644); err != nil {
		return err
	}
	return os.Symlink(nsFile, filepath.Join(d, "ns", "net"))
}

// StartSandbox makes the pod's sandbox process visible in the proc tree,
// in a network namespace of its own, as the runtime would before
// containers start, and returns that namespace's inode: what the pod's
// services must name as their member. The namespace is a real one, held
// by a process of the harness (`unshare --net`) until the test ends.
func (n *Node) StartSandbox(pod *v1.Pod) uint32 {
	n.t.Helper()
	return n.RunSandbox(pod).Netns
}

// Sandbox is a pod's sandbox process in the node's proc tree, and the
// harness process (`unshare --net`) that holds its network namespace.
type Sandbox struct {
	Netns uint32 // the namespace's inode

	holder  *exec.Cmd
	procDir string // <ProcDir>/<pid>
	once    sync.Once
	err     error
}

// RunSandbox is StartSandbox, returning the sandbox for the test to
// [Sandbox.Stop] when the pod ends; the test's cleanup stops it
// otherwise.
func (n *Node) RunSandbox(pod *v1.Pod) *Sandbox {
	n.t.Helper()
	s, err := n.NewSandbox(pod)
	if err != nil {
		n.t.Fatal(err)
	}
	return s
}

// NewSandbox is RunSandbox returning its error rather than failing the
// test, for goroutines that start pods side by side.
func (n *Node) NewSandbox(pod *v1.Pod) (*Sandbox, error) {
	// The child says "ready" once it runs in its new namespace.
	holder := exec.Command("unshare", "--net", "sh", "-c", "echo ready; exec sleep infinity")
	out, err := holder.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := holder.Start(); err != nil {
		return nil, fmt.Errorf("a network namespace for pod %s (needs root and util-linux's unshare): %w", pod.Name, err)
	}
	s := &Sandbox{holder: holder}
	n.t.Cleanup(func() { _ = s.Stop() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		return nil, fmt.Errorf("network namespace of pod %s: the holder said %q: %v", pod.Name, line, err)
	}
	nsFile := fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)
	var st syscall.Stat_t
	if err := syscall.Stat(nsFile, &st); err != nil {
		return nil, fmt.Errorf("network namespace of pod %s: %w", pod.Name, err)
	}
	s.Netns = uint32(st.Ino)
	n.procMu.Lock()
	n.nextPID++
	pid := strconv.Itoa(n.nextPID)
	n.procMu.Unlock()
	s.procDir = filepath.Join(n.ProcDir, pid) // Stop removes what of it was written
	if err := n.addProc(pid, "0::/kubepods/besteffort/pod"+string(pod.UID)+"/sandbox\n", nsFile); err != nil {
		return nil, fmt.Errorf("sandbox of pod %s: %w", pod.Name, err)
	}
	return s, nil
}

// Stop ends the sandbox as the runtime does when the pod is deleted: its
// process leaves the proc tree and the harness lets go of the namespace
// (which lives on while the agent holds it open). Safe to call twice.
func (s *Sandbox) Stop() error {
	s.once.Do(func() {
		if s.procDir != "" {
			s.err = os.RemoveAll(s.procDir)
		}
		_ = s.holder.Process.Kill()
		_ = s.holder.Wait()
	})
	return s.err
}

func (n *Node) StartKubelet(ctx context.Context, pods ...*v1.Pod) {
	n.t.Helper()
	k, err := kubelet.Start(ctx, n.KubeDir, 2, pods...)
	if err != nil {
		n.t.Fatal(err)
	}
	n.Kubelet = k
}

// StartKubeletNotReady starts the kubelet as a real one comes back from a
// restart: PodResources lists no pod until n.Kubelet.SourcesReady, while
// the device manager holds the allocations of its checkpoint.
func (n *Node) StartKubeletNotReady(ctx context.Context) {
	n.t.Helper()
	k, err := kubelet.StartNotReady(ctx, n.KubeDir, 2)
	if err != nil {
		n.t.Fatal(err)
	}
	n.Kubelet = k
}

// Services lists the services on a NIC that are not the driver's own
// (the default service, and the system ones such as cxi_eth's Ethernet
// service), reading the simulated driver's state as another process would.
func (n *Node) Services(nicName string) []cxi.Service {
	n.t.Helper()
	d, err := sim.Open(filepath.Join(n.StateDir, "cxi-sim"), nicName, sim.Options{})
	if err != nil {
		n.t.Fatal(err)
	}
	all, err := cxi.NewClient(uapi.NewDevice(d)).List(n.t.Context())
	if err != nil {
		n.t.Fatal(err)
	}
	return slices.DeleteFunc(all, func(s cxi.Service) bool { return s.IsDefault() || s.System })
}

// AllServices lists the [Node.Services] of every NIC that has any.
func (n *Node) AllServices() map[string][]cxi.Service {
	out := map[string][]cxi.Service{}
	for _, nic := range n.Truth.NICs {
		if s := n.Services(nic.Name); len(s) > 0 {
			out[nic.Name] = s
		}
	}
	return out
}

// Agent is a running slingshot-agent.
type Agent struct {
	cmd     *exec.Cmd
	Addr    string
	LogPath string
	done    chan struct{}
}

var listenRE = regexp.MustCompile(`serving metrics, health and inspect.* addr=([0-9.:]+)`)

// StartAgent runs the agent binary against the node and waits until it is
// ready. extra flags are appended.
func (n *Node) StartAgent(extra ...string) *Agent {
	n.t.Helper()
	n.checkConfined()
	args := []string{
		"--kubelet-dir", n.KubeDir, "--sysfs-root", n.Truth.SysRoot, "--dev-root", n.Truth.DevRoot,
		"--proc-root", n.ProcDir, "--state-dir", n.StateDir, "--cxi-driver", "sim",
		"--node-name", n.Name, "--metrics-addr", "127.0.0.1:0", "--config", n.Config,
		// Under the node's own root, never the host's /run.
		"--ipam-socket", filepath.Join(n.Dir, "ipam.sock"),
		// A kubelet without an API server: no events, no node taint.
		"--no-kube",
	}
	args = append(args, extra...)
	if !slices.Contains(extra, "--controller") {
		args = append(args, "--controller", "embedded")
	}
	cmd := exec.Command(AgentBin, args...)
	logPath := filepath.Join(n.Dir, fmt.Sprintf("agent-%d.log", time.Now().UnixNano()))
	logFile, err := os.Create(logPath)
	if err != nil {
		n.t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	cmd.Stdout = logFile
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	a := &Agent{cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	addrCh := make(chan string, 1)
	var copying sync.WaitGroup
	copying.Go(func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case addrCh <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(logFile, stderr)
	})
	go func() {
		copying.Wait()
		_ = cmd.Wait()
		_ = logFile.Close()
		close(a.done)
	}()
	n.t.Cleanup(func() {
		a.Stop()
		if n.t.Failed() {
			b, _ := os.ReadFile(logPath)
			n.t.Logf("agent log %s:\n%s", logPath, b)
		}
	})
	select {
	case a.Addr = <-addrCh:
	case <-a.done:
		b, _ := os.ReadFile(logPath)
		n.t.Fatalf("agent exited at start:\n%s", b)
	case <-time.After(60 * time.Second):
		n.t.Fatal("agent did not start serving")
	}
	Eventually(n.t, 30*time.Second, "agent ready", func() (bool, string) {
		resp, err := http.Get("http://" + a.Addr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return a
}

// checkConfined fails the test unless the agent's configuration keeps
// what it writes under the node's directory: the CDI spec directory
// defaults to the host's /var/run/cdi, and a test that writes its own
// configuration without cdi.specDir would write there.
func (n *Node) checkConfined() {
	n.t.Helper()
	cfg, err := config.Load(n.Config)
	if err != nil {
		n.t.Fatalf("agent configuration: %v", err)
	}
	if !cfg.CDIEnabled() {
		return
	}
	if rel, err := filepath.Rel(n.Dir, cfg.CDI.SpecDir); err != nil || !filepath.IsLocal(rel) {
		n.t.Fatalf("the agent would write CDI specs to %s, outside the test's directory %s: set cdi.specDir (Node.CDIDir)", cfg.CDI.SpecDir, n.Dir)
	}
}

// Stop sends SIGTERM and waits for the agent to exit.
func (a *Agent) Stop() {
	select {
	case <-a.done:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// RSS returns the agent process's resident memory in bytes (VmRSS).
func (a *Agent) RSS() (int64, error) {
	m, err := a.Memory()
	return m.RSS, err
}

// Memory is a process's resident memory in bytes, as /proc/<pid>/status
// splits it.
type Memory struct {
	RSS   int64 // VmRSS: the sum of the three below
	Anon  int64 // RssAnon: heap, stacks, the Go runtime's own
	File  int64 // RssFile: pages of mapped files, the binary's above all
	Shmem int64 // RssShmem: shared memory
}

// Memory reads the agent process's resident memory.
func (a *Agent) Memory() (Memory, error) {
	path := fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	fields := map[string]*int64{"VmRSS:": &m.RSS, "RssAnon:": &m.Anon, "RssFile:": &m.File, "RssShmem:": &m.Shmem}
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, "\t")
		if v := fields[name]; ok && v != nil {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return Memory{}, fmt.Errorf("%s: %s: %w", path, name, err)
			}
			*v = kb * 1024
			delete(fields, name)
		}
	}
	if len(fields) > 0 {
		return Memory{}, fmt.Errorf("%s: no %v", path, slices.Sorted(maps.Keys(fields)))
	}
	return m, nil
}

// Pid is the agent process's id.
func (a *Agent) Pid() int { return a.cmd.Process.Pid }

// Kill sends SIGKILL, as a crash or an OOM kill would.
func (a *Agent) Kill() {
	_ = a.cmd.Process.Kill()
	<-a.done
}

// Metric returns the value of a sample of the agent's /metrics whose line
// starts with prefix.
func (a *Agent) Metric(t TB, prefix string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + a.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, prefix)), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// Scrape reads every sample of the agent's /metrics, keyed as the line
// names it: "go_goroutines", `slingshot_agent_pods{state="running"}`. It
// asks for them uncompressed, so that reading them makes the agent
// allocate no compressor (gzip's holds about 1.5 MB).
func (a *Agent) Scrape(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.Addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("/metrics: line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics: line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	return out, nil
}

// Eventually polls cond until it holds or timeout passes. It waits on a
// condition, not for a guessed duration: every check is a real read.
func Eventually(t TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in %v (last: %s)", what, timeout, last)
		}
		<-tick.C
	}
}

var podSeq int // guarded by podMu

var podMu sync.Mutex

// NewPod returns a pod whose one container asks for count NICs. owner, if
// set, is the controlling owner (a Job).
func NewPod(ns, name string, count int, owner *metav1.OwnerReference) *v1.Pod {
	return NewPodFor(NICResource, ns, name, count, owner)
}

// NewPodFor is NewPod for any resource.
func NewPodFor(res v1.ResourceName, ns, name string, count int, owner *metav1.OwnerReference) *v1.Pod {
	podMu.Lock()
	podSeq++
	seq := podSeq
	podMu.Unlock()
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("0b7c6e4a-0000-4000-8000-%012d", seq))},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "main",
			Resources: v1.ResourceRequirements{
				Limits:   v1.ResourceList{res: *resource.NewQuantity(int64(count), resource.DecimalSI)},
				Requests: v1.ResourceList{res: *resource.NewQuantity(int64(count), resource.DecimalSI)},
			},
		}}},
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

// Itoa formats an int64.
func Itoa(v int64) string { return strconv.FormatInt(v, 10) }

func Ptr[T any](v T) *T { return &v }

// StartController serves the controller's gRPC API on loopback over TLS,
// requiring agent certificates, with owner resolution over a fake
// metadata API that holds the pods and their Jobs.
func StartController(t TB, ctx context.Context, pki *PKI, pods []*v1.Pod, jobs []*metav1.OwnerReference) string {
	t.Helper()
	addr, _ := StartControllerWith(t, ctx, pki, pods, jobs, controller.Config{})
	return addr
}

// StartControllerWith is StartController with cfg; it also returns the
// controller itself, for tests that look inside or act as a node.
func StartControllerWith(t TB, ctx context.Context, pki *PKI, pods []*v1.Pod, jobs []*metav1.OwnerReference, cfg controller.Config) (string, *controller.Allocator) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, p := range pods {
		objs = append(objs, &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, OwnerReferences: p.OwnerReferences},
		})
	}
	for _, j := range jobs {
		objs = append(objs, &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: j.APIVersion, Kind: j.Kind},
			ObjectMeta: metav1.ObjectMeta{Namespace: pods[0].Namespace, Name: j.Name, UID: types.UID(j.UID)},
		})
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, objs...)

	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "controller.db"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := controller.New(st, owner.NewResolver(md, owner.DefaultKinds), nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pki.serverCert},
		ClientCAs:    pki.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	g := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(auth.UnaryInterceptor(auth.MTLS{Prefix: "slingshot-agent:"})))
	grpcapi.NewServer(svc, time.Minute).Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = svc.Run(runCtx) })
	wg.Go(func() { _ = g.Serve(lis) })
	t.Cleanup(func() {
		g.Stop()
		cancel()
		wg.Wait()
		_ = st.Close()
	})
	return lis.Addr().String(), svc
}

// PKI is a CA with a server certificate for 127.0.0.1.
type PKI struct {
	dir        string
	ca         *x509.Certificate
	caKey      *ecdsa.PrivateKey
	CAFile     string
	pool       *x509.CertPool
	serverCert tls.Certificate
	serial     int64
}

func NewPKI(t TB) *PKI {
	t.Helper()
	p := &PKI{dir: t.TempDir(), serial: 1}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "slingshot test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caKey = key
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.ca)
	p.CAFile = filepath.Join(p.dir, "ca.pem")
	writePEM(t, p.CAFile, "CERTIFICATE", der)
	certFile, keyFile := p.Issue(t, "slingshot-controller")
	sc, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	p.serverCert = sc
	return p
}

// Issue writes a certificate for cn (valid for 127.0.0.1, client and
// server use) and its key, and returns their files.
func (p *PKI) Issue(t TB, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(p.dir, cn+".pem")
	keyFile = filepath.Join(p.dir, cn+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
