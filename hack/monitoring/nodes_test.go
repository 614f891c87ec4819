package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	nriapi "github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/slingshot-k8s/slingshot/agent/dra"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// The agent's --api values (agent.APIDevicePlugin and agent.APIDRA; the
// agent package is not imported for them, as it would bring its whole
// dependency list into this module's go.mod).
const (
	apiDevicePlugin = "deviceplugin"
	apiDRA          = "dra"
)

// agentNode is one node's agent: the real binary, built from this tree,
// on a generated sysfs with the simulated CXI driver, serving its NICs
// through one API (--api), with everything it keeps under dir.
type agentNode struct {
	api      string // apiDevicePlugin or apiDRA
	name     string
	proc     *process
	metrics  string // the address of /metrics, /readyz and /inspect
	stateDir string

	// DRA mode's: the API server, the kubelet's DRA client, the
	// runtime's NRI, the host's root as the agent sees it
	// (<proc-root>/1/root) and the claims made so far.
	kube     *apiStandIn
	dra      drapb.DRAPluginClient
	runtime  *adaptation.Adaptation
	hostRoot string
	claims   int
}

// agentConfig is the agent's configuration file: the CDI specs under dir
// (the default is the host's /var/run/cdi) and a destroy attempt of one
// EBUSY retry, so that a round of retries is short (rounds are what the
// metrics count).
const agentConfig = "cdi: {specDir: %q}\ncleanup: {busyRetries: 1, busyInterval: 10ms}\n"

// startAgentNode starts node name's agent with api, talking to the
// controller at controller, and waits until it is ready. In DRA mode
// the parts of a node the test cannot run are stand-ins that speak their
// real protocols, all under dir: the API server (apiStandIn), the
// container runtime's NRI socket (NRI's own runtime adaptation, which
// containerd and CRI-O embed, so the agent's NRI plugin connects as to
// either), and the kubelet, which registers the plugin and calls it over
// gRPC as it would (the kubelet's DRA and plugin-registration APIs). The device-plugin mode
// runs without the Kubernetes API (--no-kube), as the agent allows.
func startAgentNode(t *testing.T, bin, dir, api, name, controller string) *agentNode {
	t.Helper()
	n := &agentNode{api: api, name: name, stateDir: filepath.Join(dir, "state")}
	truth, err := mocksysfs.Write(filepath.Join(dir, "machine"), mocksysfs.Spec{NICs: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"kubelet", "state", "cdi"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	config := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, agentConfig, filepath.Join(dir, "cdi")), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--api", api, "--node-name", name,
		"--kubelet-dir", filepath.Join(dir, "kubelet"), "--sysfs-root", truth.SysRoot, "--dev-root", truth.DevRoot,
		"--proc-root", truth.ProcRoot, "--state-dir", n.stateDir, "--cxi-driver", "sim", "--cri-socket", "none",
		"--metrics-addr", "127.0.0.1:0", "--config", config,
		"--ipam-socket", filepath.Join(dir, "ipam.sock"), "--controller", controller, "--log-format", "text"}
	if api == apiDRA {
		n.kube = newAPIStandIn(t)
		if err := n.kube.put("/api/v1/nodes/"+name, &corev1.Node{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: "5d7c1f0e-0000-4000-8000-000000000001"}}); err != nil {
			t.Fatal(err)
		}
		kubeconfig, err := n.kube.kubeconfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		nri := filepath.Join(dir, "nri.sock")
		n.runtime = startRuntime(t, dir, nri)
		n.hostRoot = filepath.Join(truth.ProcRoot, "1", "root")
		args = append(args, "--kubeconfig", kubeconfig, "--nri-socket", nri)
	} else {
		args = append(args, "--no-kube")
	}
	n.proc = start(t, filepath.Join(bin, "slingshot-agent"), agentServingRE, 1, args...)
	n.metrics = n.proc.addrs[0].addr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s agent's log:\n%s", api, n.proc.log())
			if n.kube != nil {
				t.Logf("API requests the stand-in could not answer: %q", n.kube.unanswered())
			}
		}
	})
	if api == apiDRA {
		n.dra = registerDRA(t, n.proc, filepath.Join(dir, "kubelet"))
	}
	waitReady(t, n.metrics, n.proc)
	return n
}

// The runtime stand-in's library logs every plugin connection through
// logrus to the test's output; only its errors are worth showing there.
func init() { nrilog.Set(nriErrors{}) }

type nriErrors struct{}

func (nriErrors) Debugf(context.Context, string, ...any) {}
func (nriErrors) Infof(context.Context, string, ...any)  {}
func (nriErrors) Warnf(context.Context, string, ...any)  {}
func (nriErrors) Errorf(_ context.Context, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "NRI runtime stand-in: "+format+"\n", args...)
}

// startRuntime serves the container runtime's side of NRI on socket, as
// containerd does, with no pods: the agent's plugin connects, is
// synchronized, and the agent counts itself connected.
func startRuntime(t *testing.T, dir, socket string) *adaptation.Adaptation {
	t.Helper()
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	// The plugin directories would default to the host's /opt/nri and
	// /etc/nri: the runtime starts the plugins it finds there.
	r, err := adaptation.New("runtime-stand-in", "v0", sync, update, adaptation.WithSocketPath(socket),
		adaptation.WithPluginPath(filepath.Join(dir, "nri", "plugins")), adaptation.WithPluginConfigPath(filepath.Join(dir, "nri", "conf.d")))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatalf("start the NRI runtime stand-in: %v", err)
	}
	t.Cleanup(r.Stop)
	return r
}

// registerDRA does what the kubelet does with a DRA plugin: it waits for
// the plugin's registration socket, asks for its endpoint, tells it it is
// registered, and returns a client of its DRA service.
func registerDRA(t *testing.T, p *process, kubeletDir string) drapb.DRAPluginClient {
	t.Helper()
	reg := filepath.Join(kubeletDir, "plugins_registry", dra.DefaultDriverName+"-reg.sock")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(reg); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no registration socket %s in 30 s:\n%s", reg, p.log())
		}
		select {
		case <-p.done:
			t.Fatalf("the agent exited before it registered:\n%s", p.log())
		case <-time.After(50 * time.Millisecond): // the next look
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := dialUnix(t, reg)
	info, err := registerapi.NewRegistrationClient(rc).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("registration GetInfo: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != dra.DefaultDriverName {
		t.Fatalf("registration: a %s plugin %q, want the DRA plugin %q", info.Type, info.Name, dra.DefaultDriverName)
	}
	if _, err := registerapi.NewRegistrationClient(rc).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("registration NotifyRegistrationStatus: %v", err)
	}
	return drapb.NewDRAPluginClient(dialUnix(t, info.Endpoint))
}

func dialUnix(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}))
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// claim is a ResourceClaim the scheduler has allocated one of the node's
// NICs to, reserved for one pod.
type claim struct {
	Namespace, Name, UID string
	Pod, PodUID          string
}

// newClaim puts a claim allocated cxi0 of this node into the API server,
// as the scheduler leaves it, and returns it.
func (n *agentNode) newClaim() (claim, error) {
	n.claims++
	c := claim{Namespace: "team-a", Name: "nic-" + strconv.Itoa(n.claims),
		UID: fmt.Sprintf("c1a1a000-0000-4000-8000-%012d", n.claims),
		Pod: "train-" + strconv.Itoa(n.claims), PodUID: fmt.Sprintf("9d0d0000-0000-4000-8000-%012d", n.claims)}
	obj := &resourceapi.ResourceClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: types.UID(c.UID)},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "nic", Driver: dra.DefaultDriverName, Pool: n.name, Device: "cxi0"}},
			}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: c.Pod, UID: types.UID(c.PodUID)}},
		},
	}
	return c, n.kube.put("/apis/resource.k8s.io/v1/namespaces/"+c.Namespace+"/resourceclaims/"+c.Name, obj)
}

// prepare calls NodePrepareResources for c as the kubelet does before the
// pod's sandbox; it returns the claim's error as the agent answered it.
func (n *agentNode) prepare(ctx context.Context, c claim) error {
	resp, err := n.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: c.UID}}})
	if err != nil {
		return fmt.Errorf("NodePrepareResources %s/%s: %w", c.Namespace, c.Name, err)
	}
	r := resp.Claims[c.UID]
	if r == nil {
		return fmt.Errorf("NodePrepareResources %s/%s: no answer for the claim", c.Namespace, c.Name)
	}
	if r.Error != "" {
		return fmt.Errorf("prepare %s/%s: %s", c.Namespace, c.Name, r.Error)
	}
	return nil
}

// runSandbox starts c's pod's sandbox as the runtime does: it tells the
// NRI plugins (the agent's binds the claim's services to the sandbox's
// network namespace and enables them) and returns the error a plugin
// refused it with. The namespace is a file under the host's root as the
// agent sees it, named as the CNI names one: the agent takes the inode of
// the path the runtime names (dra.OpenNetns), and the simulated driver
// admits it as the real one would a namespace's; a real namespace would
// need privileges this test does not have.
func (n *agentNode) runSandbox(ctx context.Context, c claim) error {
	netns := "/var/run/netns/cni-" + c.PodUID
	f := filepath.Join(n.hostRoot, netns)
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		return err
	}
	err := n.runtime.RunPodSandbox(ctx, &adaptation.RunPodSandboxRequest{Pod: &nriapi.PodSandbox{
		Id: "sandbox-" + c.PodUID, Name: c.Pod, Uid: c.PodUID, Namespace: c.Namespace,
		Linux: &nriapi.LinuxPodSandbox{Namespaces: []*nriapi.LinuxNamespace{{Type: "network", Path: netns}}},
	}})
	if err != nil {
		return fmt.Errorf("run sandbox of %s/%s: %w", c.Namespace, c.Pod, err)
	}
	return nil
}

// unprepare calls NodeUnprepareResources for c as the kubelet does once
// the claim's pods are gone (and again while it fails).
func (n *agentNode) unprepare(ctx context.Context, c claim) error {
	resp, err := n.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: c.UID}}})
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources %s/%s: %w", c.Namespace, c.Name, err)
	}
	r := resp.Claims[c.UID]
	if r == nil {
		return fmt.Errorf("NodeUnprepareResources %s/%s: no answer for the claim", c.Namespace, c.Name)
	}
	if r.Error != "" {
		return fmt.Errorf("unprepare %s/%s: %s", c.Namespace, c.Name, r.Error)
	}
	return nil
}

// claimLife takes a new claim through its whole life on the node: the
// kubelet prepares it, the runtime starts its pod's sandbox (the agent
// binds the services), and the kubelet unprepares it.
func (n *agentNode) claimLife(ctx context.Context) error {
	c, err := n.newClaim()
	if err == nil {
		err = n.prepare(ctx, c)
	}
	if err == nil {
		err = n.runSandbox(ctx, c)
	}
	if err == nil {
		err = n.unprepare(ctx, c)
	}
	return err
}

// services are the CXI services the agent holds for c, as its /inspect
// reports them, by NIC.
func (n *agentNode) services(ctx context.Context, c claim) (map[string][]uint32, error) {
	r, err := inspect.Fetch(ctx, "http://"+n.metrics)
	if err != nil {
		return nil, err
	}
	out := map[string][]uint32{}
	for _, cl := range r.Claims {
		if cl.UID != c.UID {
			continue
		}
		for _, s := range cl.Services {
			nic, rest, ok := strings.Cut(s, ":")
			id, _, _ := strings.Cut(rest, "@")
			v, err := strconv.ParseUint(id, 10, 32)
			if !ok || err != nil {
				return nil, fmt.Errorf("inspect: claim %s has service %q, want NIC:ID", c.Name, s)
			}
			out[nic] = append(out[nic], uint32(v))
		}
	}
	return out, nil
}

// scrapeText is one scrape of the agent's /metrics.
func (n *agentNode) scrapeText() ([]byte, error) {
	resp, err := http.Get("http://" + n.metrics + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape %s agent: %w", n.api, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s agent: %w", n.api, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s agent: %s", n.api, resp.Status)
	}
	return b, nil
}
