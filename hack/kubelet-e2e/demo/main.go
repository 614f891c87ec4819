// Command demo shows the Slingshot agent at work on a laptop with no
// Slingshot NIC: a generated mock sysfs tree (8 NICs on 2 NUMA nodes and 8
// GPUs), the simulated CXI driver, the embedded controller, and the
// kubelet's own device manager and PodResources server driving the agent
// binary. It admits the pods of two jobs, shows what the agent programmed,
// lets the pods exit and shows the cleanup. It ends by itself.
//
//	go run ./demo            (from hack/kubelet-e2e; or `make demo`)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/slingshot-k8s/slingshot/hack/kubelet-e2e/harness"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

func main() {
	clean := flag.Bool("clean", false, "remove the demo's directory (logs, trees, state) when it ends")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go run ./demo [--clean]\n\nRuns the Slingshot agent against a simulated node and the kubelet's own device manager.")
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := newDemo(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	err = d.run()
	d.close(!*clean || err != nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo failed:", err)
		os.Exit(1)
	}
}

// demo is the harness's TB for a program: Fatal ends the demo.
type demo struct {
	ctx      context.Context
	dir      string
	cleanups []func()
	failed   bool
	out      io.Writer
}

type fatal struct{ msg string }

func newDemo(ctx context.Context) (*demo, error) {
	dir, err := os.MkdirTemp("", "slingshot-demo-")
	if err != nil {
		return nil, err
	}
	// The kubelet's code logs through klog; keep its lines in the logs.
	klogFile, err := os.Create(filepath.Join(dir, "kubelet.log"))
	if err != nil {
		return nil, err
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(klogFile)
	return &demo{ctx: ctx, dir: dir, out: os.Stdout, cleanups: []func(){func() { klogFile.Close() }}}, nil
}

func (d *demo) Helper()                  {}
func (d *demo) Context() context.Context { return d.ctx }
func (d *demo) Failed() bool             { return d.failed }
func (d *demo) Cleanup(f func())         { d.cleanups = append(d.cleanups, f) }
func (d *demo) Logf(format string, args ...any) {
	fmt.Fprintf(d.out, "    "+format+"\n", args...)
}
func (d *demo) Fatal(args ...any) { d.failed = true; panic(fatal{fmt.Sprint(args...)}) }
func (d *demo) Fatalf(format string, args ...any) {
	d.failed = true
	panic(fatal{fmt.Sprintf(format, args...)})
}

var tempSeq int

func (d *demo) TempDir() string {
	tempSeq++
	p := filepath.Join(d.dir, fmt.Sprintf("node%d", tempSeq))
	if err := os.MkdirAll(p, 0o755); err != nil {
		d.Fatal(err)
	}
	return p
}

func (d *demo) close(keep bool) {
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
	if keep {
		fmt.Fprintf(d.out, "\nLogs and state are in %s (agent-*.log, kubelet.log, the mock tree, the agent's state).\n", d.dir)
		return
	}
	fmt.Fprintf(d.out, "\nThe demo's directory %s was removed (--clean).\n", d.dir)
	_ = os.RemoveAll(d.dir)
}

func (d *demo) step(format string, args ...any) {
	fmt.Fprintf(d.out, "\n\033[1m== "+format+"\033[0m\n", args...)
}

func (d *demo) run() (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = errors.New(f.msg)
		}
	}()
	start := time.Now()

	d.step("Building the agent")
	if err := harness.BuildAgent(d.dir, false); err != nil {
		return err
	}
	d.Logf("%s", harness.AgentBin)

	d.step("Generating a mock node: 8 Slingshot NICs on 2 NUMA nodes, 4 GPUs")
	n := harness.NewNodeSpec(d, "demo-node", mocksysfs.Spec{NICs: 8, NUMANodes: 2, GPUs: 4, Seed: 42})
	for _, nic := range n.Truth.NICs {
		d.Logf("%s  %s  NUMA %d  netdev %s", nic.Name, nic.PCIAddress, nic.NUMANode, nic.NetDev)
	}
	for _, g := range n.Truth.GPUs {
		d.Logf("GPU %s  NUMA %d  %s", g.BDF, g.NUMANode, g.ProductName)
	}
	// One machine type: 2 GPUs and their nearest NIC per unit; the NIC
	// resource offers the other 6 NICs.
	cfg := fmt.Sprintf(`podResources: {pollInterval: 200ms}
health: {pollInterval: 500ms}
cdi: {specDir: %s}
gpu:
  machineTypes:
  - {name: gpu-2x, cpu: "32", memory: 256Gi, gpu: {type: nvidia, count: 2, family: H100}, nicsPerUnit: 1}
  nodePool:
  - {node: demo-node, mode: ready, machineType: gpu-2x}
`, n.CDIDir)
	if err := os.WriteFile(n.Config, []byte(cfg), 0o644); err != nil {
		return err
	}

	d.step("Starting the kubelet's device manager and PodResources server")
	n.StartKubelet(d.ctx)
	d.Logf("kubelet directory %s", n.KubeDir)

	d.step("Starting slingshot-agent (simulated CXI driver, embedded controller)")
	agent := n.StartAgent()
	d.Logf("agent log %s", agent.LogPath)
	harness.Eventually(d, 15*time.Second, "registration", func() (bool, string) {
		c, _ := n.Kubelet.Capacity(harness.NICResource)
		u, _ := n.Kubelet.Capacity("hpe.com/gpu-2x")
		return c == 6 && u == 2, harness.Itoa(c)
	})
	for _, res := range []string{harness.NICResource, "hpe.com/gpu-2x"} {
		c, a := n.Kubelet.Capacity(res)
		d.Logf("registered: the kubelet sees %s capacity %d, allocatable %d", res, c, a)
	}

	d.step("Admitting the pods of two jobs (each pod asks for 2 NICs)")
	type running struct {
		pod   *v1.Pod
		netns uint32
	}
	var pods []running
	for _, spec := range []struct{ job, pod string }{
		{"cfd-solver", "cfd-solver-0"}, {"cfd-solver", "cfd-solver-1"}, {"md-sim", "md-sim-0"},
	} {
		owner := &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: spec.job, UID: types.UID("job-" + spec.job), Controller: harness.Ptr(true)}
		p := harness.NewPod("hpc", spec.pod, 2, owner)
		netns := n.StartSandbox(p)
		t0 := time.Now()
		opts, err := n.Kubelet.Admit(d.ctx, p)
		if err != nil {
			return fmt.Errorf("admit %s: %w", spec.pod, err)
		}
		env := map[string]string{}
		for _, e := range opts["main"].Envs {
			env[e.Name] = e.Value
		}
		var devs []string
		for _, dev := range opts["main"].Devices {
			devs = append(devs, dev.PathInContainer)
		}
		envFile, _ := os.ReadFile(filepath.Join(opts["main"].Mounts[0].HostPath, "slingshot.env"))
		d.Logf("%-13s (job %s, netns %d) admitted in %v", spec.pod, spec.job, netns, time.Since(t0).Round(time.Millisecond))
		d.Logf("    devices %s; Allocate env SLINGSHOT_DEVICES=%s SLINGSHOT_TCS=%s; CDI %s",
			strings.Join(devs, ","), env["SLINGSHOT_DEVICES"], env["SLINGSHOT_TCS"], opts["main"].CDIDevices[0].Name)
		d.Logf("    /var/run/slingshot/slingshot.env: %s", strings.ReplaceAll(strings.TrimSpace(string(envFile)), "\n", " "))
		pods = append(pods, running{p, netns})
	}
	d.Logf("(the embedded controller has no API server to find a pod's job, so every pod")
	d.Logf(" gets its own VNI; with the cluster controller, pods of one job share one.)")

	d.step("CXI services programmed in the (simulated) driver")
	svcs := n.AllServices()
	names := make([]string, 0, len(svcs))
	for name := range svcs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, s := range svcs[name] {
			d.Logf("%s  service %-3d VNIs %v  members %v  TCs %s  enabled %v", name, s.ID, s.VNIs, s.Members, s.TCs, s.Enabled)
		}
	}

	d.step("slingshot-agent inspect")
	out, err := exec.CommandContext(d.ctx, harness.AgentBin, "inspect", "--addr", "http://"+agent.Addr).CombinedOutput()
	if err != nil {
		return fmt.Errorf("inspect: %w: %s", err, out)
	}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		d.Logf("%s", line)
	}

	d.step("A few of the agent's metrics")
	if err := showMetrics(d, agent.Addr, []string{
		"slingshot_agent_ready", "slingshot_agent_services{", "slingshot_agent_pods{",
		"slingshot_agent_prestart_duration_seconds_count", "slingshot_agent_deviceplugin_allocations_total",
		"slingshot_agent_nic_healthy{nic=\"cxi0\"}",
	}); err != nil {
		return err
	}

	d.step("The pods exit")
	t0 := time.Now()
	for _, r := range pods {
		n.Kubelet.RemovePod(r.pod.UID)
	}
	harness.Eventually(d, 10*time.Second, "cleanup", func() (bool, string) {
		return len(n.AllServices()) == 0, "services remain"
	})
	harness.Eventually(d, 10*time.Second, "VNIs released", func() (bool, string) {
		v, _ := agent.Metric(d, "slingshot_agent_cleanup_duration_seconds_count")
		return v == float64(len(pods)), "cleanups still running"
	})
	d.Logf("every pod service destroyed and VNI released %v after the pods exited", time.Since(t0).Round(time.Millisecond))
	if err := showMetrics(d, agent.Addr, []string{"slingshot_agent_services{", "slingshot_agent_cleanup_duration_seconds_count"}); err != nil {
		return err
	}

	d.step("Stopping the agent")
	agent.Stop()
	d.Logf("done in %v", time.Since(start).Round(time.Second))
	return nil
}

func showMetrics(d *demo, addr string, prefixes []string) error {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				d.Logf("%s", line)
			}
		}
	}
	return nil
}
