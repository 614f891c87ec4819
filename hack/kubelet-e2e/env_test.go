package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
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
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/hack/kubelet-e2e/kubelet"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

const nicResource = "hpe.com/cxi"

// agentBin is the slingshot-agent binary TestMain builds.
var agentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "slingshot-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = filepath.Join(dir, "slingshot-agent")
	// Built in the project's own module, with its own go.mod, as it ships.
	build := exec.Command("go", "build", "-race", "-o", agentBin, "./cmd/slingshot-agent")
	build.Dir = filepath.Join("..", "..")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build slingshot-agent:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// node is one simulated node: a mock sysfs tree, a kubelet directory, a
// proc tree for pods' network namespaces, and the agent's state.
type node struct {
	t        *testing.T
	name     string
	dir      string
	truth    *mocksysfs.Truth
	kubeDir  string
	stateDir string
	procDir  string
	cdiDir   string
	config   string
	kubelet  *kubelet.Kubelet
	nextPID  int
}

func newNode(t *testing.T, name string, nics, numa int) *node {
	return newNodeSpec(t, name, mocksysfs.Spec{NICs: nics, NUMANodes: numa, Seed: 7})
}

func newNodeSpec(t *testing.T, name string, spec mocksysfs.Spec) *node {
	t.Helper()
	dir := t.TempDir()
	truth, err := mocksysfs.Write(filepath.Join(dir, "machine"), spec)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{
		t: t, name: name, dir: dir, truth: truth,
		kubeDir:  filepath.Join(dir, "kubelet"),
		stateDir: filepath.Join(dir, "state"),
		procDir:  truth.ProcRoot, // the mock's NVIDIA driver files, and our pods' processes
		cdiDir:   filepath.Join(dir, "cdi"),
		config:   filepath.Join(dir, "agent.yaml"),
		nextPID:  1000,
	}
	for _, d := range []string{n.kubeDir, n.stateDir, n.cdiDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.writeProc("1", "0::/init.scope\n", 4026531840) // the host
	cfg := fmt.Sprintf("podResources: {pollInterval: 100ms}\nhealth: {pollInterval: 100ms}\ncdi: {specDir: %s}\n", n.cdiDir)
	if err := os.WriteFile(n.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *node) writeProc(pid, cgroup string, netns uint32) {
	n.t.Helper()
	d := filepath.Join(n.procDir, pid)
	if err := os.MkdirAll(filepath.Join(d, "ns"), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "cgroup"), []byte(cgroup), 0o644); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Symlink(fmt.Sprintf("net:[%d]", netns), filepath.Join(d, "ns", "net")); err != nil {
		n.t.Fatal(err)
	}
}

// startSandbox makes the pod's sandbox process visible in the proc tree,
// in its own network namespace, as the runtime would before containers
// start.
func (n *node) startSandbox(pod *v1.Pod, netns uint32) {
	n.nextPID++
	n.writeProc(strconv.Itoa(n.nextPID), "0::/kubepods/besteffort/pod"+string(pod.UID)+"/sandbox\n", netns)
}

func (n *node) startKubelet(ctx context.Context, pods ...*v1.Pod) {
	n.t.Helper()
	k, err := kubelet.Start(ctx, n.kubeDir, 2, pods...)
	if err != nil {
		n.t.Fatal(err)
	}
	n.kubelet = k
}

// services lists the simulated driver's non-default services on a NIC,
// reading the driver's state as another process would.
func (n *node) services(nicName string) []cxi.Service {
	n.t.Helper()
	d, err := sim.Open(filepath.Join(n.stateDir, "cxi-sim"), nicName, sim.Options{})
	if err != nil {
		n.t.Fatal(err)
	}
	all, err := cxi.NewClient(uapi.NewDevice(d)).List(n.t.Context())
	if err != nil {
		n.t.Fatal(err)
	}
	return slices.DeleteFunc(all, func(s cxi.Service) bool { return s.IsDefault() })
}

// allServices counts the non-default services on every NIC.
func (n *node) allServices() map[string][]cxi.Service {
	out := map[string][]cxi.Service{}
	for _, nic := range n.truth.NICs {
		if s := n.services(nic.Name); len(s) > 0 {
			out[nic.Name] = s
		}
	}
	return out
}

// agentProc is a running slingshot-agent.
type agentProc struct {
	cmd     *exec.Cmd
	addr    string
	logPath string
	done    chan struct{}
}

var listenRE = regexp.MustCompile(`serving metrics, health and inspect.* addr=([0-9.:]+)`)

// startAgent runs the agent binary against the node and waits until it is
// ready. extra flags are appended.
func (n *node) startAgent(extra ...string) *agentProc {
	n.t.Helper()
	args := []string{
		"--kubelet-dir", n.kubeDir, "--sysfs-root", n.truth.SysRoot, "--dev-root", n.truth.DevRoot,
		"--proc-root", n.procDir, "--state-dir", n.stateDir, "--cxi-driver", "sim",
		"--node-name", n.name, "--metrics-addr", "127.0.0.1:0", "--config", n.config,
	}
	args = append(args, extra...)
	if !slices.Contains(extra, "--controller") {
		args = append(args, "--controller", "embedded")
	}
	cmd := exec.Command(agentBin, args...)
	logPath := filepath.Join(n.dir, fmt.Sprintf("agent-%d.log", time.Now().UnixNano()))
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
	a := &agentProc{cmd: cmd, logPath: logPath, done: make(chan struct{})}
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
		a.stop()
		if n.t.Failed() {
			b, _ := os.ReadFile(logPath)
			n.t.Logf("agent log %s:\n%s", logPath, b)
		}
	})
	select {
	case a.addr = <-addrCh:
	case <-a.done:
		b, _ := os.ReadFile(logPath)
		n.t.Fatalf("agent exited at start:\n%s", b)
	case <-time.After(60 * time.Second):
		n.t.Fatal("agent did not start serving")
	}
	eventually(n.t, 30*time.Second, "agent ready", func() (bool, string) {
		resp, err := http.Get("http://" + a.addr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return a
}

// stop sends SIGTERM and waits for the agent to exit.
func (a *agentProc) stop() {
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

// kill sends SIGKILL, as a crash or an OOM kill would.
func (a *agentProc) kill() {
	_ = a.cmd.Process.Kill()
	<-a.done
}

// metric returns the value of a sample of the agent's /metrics whose line
// starts with prefix.
func (a *agentProc) metric(t *testing.T, prefix string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + a.addr + "/metrics")
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

// eventually polls cond until it holds or timeout passes. It waits on a
// condition, not for a guessed duration: every check is a real read.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
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

var podSeq int

// newPod returns a pod whose one container asks for count NICs. owner, if
// set, is the controlling owner (a Job).
func newPod(ns, name string, count int, owner *metav1.OwnerReference) *v1.Pod {
	return newPodFor(nicResource, ns, name, count, owner)
}

// newPodFor is newPod for any resource.
func newPodFor(res v1.ResourceName, ns, name string, count int, owner *metav1.OwnerReference) *v1.Pod {
	podSeq++
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("0b7c6e4a-0000-4000-8000-%012d", podSeq))},
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

func strconvFormat(v int64) string { return strconv.FormatInt(v, 10) }
