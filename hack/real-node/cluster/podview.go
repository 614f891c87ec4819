package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// ContainerEnvFile is the agent's per-container env file as the container
// sees it (agent.ContainerDir + "/" + agent.EnvFileName); the device
// plugin's only: with DRA the values come through CDI alone.
const ContainerEnvFile = "/var/run/slingshot/slingshot.env"

// PodView is what a node shows of one running pod, whatever asked for
// its NICs: the network namespace its processes share, its workload's
// process and Slingshot environment, and the services of the node's
// simulated driver that admit the namespace. Each suite adds what only its
// front end gives the pod (the agent's report of it, its claims).
type PodView struct {
	Key  string // namespace/name
	UID  string
	Node string // the node it runs on
	// Netns is the pod's network namespace inode, as the host sees it.
	Netns uint32
	// App is the workload process (the test image's /workload).
	App Process
	// Env is the workload's SLINGSHOT_* environment, however the runtime
	// gave it (the device plugin's Allocate answer, CDI edits); VNIs is
	// its SLINGSHOT_VNIS, the job's (or the pod's own) VNI first.
	Env  map[string]string
	VNIs []uint16
	// File is the SLINGSHOT_* of the agent's env file in the container
	// (ContainerEnvFile), which only the device plugin writes: nil with
	// DRA, whose values come through CDI alone.
	File map[string]string
	// Admitting are the services of the node's driver that admit Netns,
	// in NIC and ID order, the driver's own included (one of them
	// admitting a pod would be as wrong). The driver's state names no
	// pod, so a pod's services are found by the namespace they admit,
	// whichever front end made them.
	Admitting []simstate.Service
}

// JobVNI is the first of v.VNIs: the job's (or the pod's own) VNI; 0 when
// the container has none.
func (v PodView) JobVNI() uint16 {
	if len(v.VNIs) == 0 {
		return 0
	}
	return v.VNIs[0]
}

// ViewPod reads the pod's processes and its node's driver (of whichever
// of e's nodes it runs on). It fails tb when it cannot read them or finds
// no workload among the processes, and reports without stopping what a
// check would trip on less clearly: processes of the pod in two network
// namespaces (a service admitting one of them would not admit the other),
// an unparsable SLINGSHOT_VNIS, and, with the device plugin, an env file
// it cannot read.
func (e *Env) ViewPod(tb testing.TB, p corev1.Pod) PodView {
	tb.Helper()
	v := PodView{Key: p.Namespace + "/" + p.Name, UID: string(p.UID), Node: p.Spec.NodeName}
	ne := e.nodeNamed(v.Node)
	if ne == nil {
		tb.Fatalf("pod %s: its node %q is none of the cluster's", v.Key, v.Node)
	}
	procs, err := PodProcesses(v.UID)
	if err != nil {
		tb.Fatalf("pod %s: %v", v.Key, err)
	}
	found := false
	for _, pr := range procs {
		ino, err := netns.ParseNetnsLink(pr.Netns)
		if err != nil {
			tb.Fatalf("pod %s pid %d: %v", v.Key, pr.Pid, err)
		}
		if v.Netns != 0 && ino != v.Netns {
			tb.Errorf("pod %s: processes in two network namespaces, %d and %d", v.Key, v.Netns, ino)
		}
		v.Netns = ino
		if strings.HasSuffix(pr.Exe, "/workload") {
			v.App, found = pr, true
		}
	}
	if !found {
		tb.Fatalf("pod %s: no workload process among %+v", v.Key, procs)
	}
	v.Env = slingshotVars(v.App.Env)
	if list := v.Env["SLINGSHOT_VNIS"]; list != "" {
		for _, s := range strings.Split(list, ",") {
			n, err := strconv.ParseUint(s, 10, 16)
			if err != nil {
				tb.Errorf("pod %s: SLINGSHOT_VNIS %q: %v", v.Key, list, err)
			}
			v.VNIs = append(v.VNIs, uint16(n))
		}
	}
	if ne.opts.API != APIDRA {
		file, err := EnvFile(v.App.Pid, ContainerEnvFile)
		if err != nil {
			tb.Errorf("pod %s: env file: %v", v.Key, err)
		}
		v.File = slingshotVars(file)
	}
	if v.Admitting, err = ne.ServicesOf(v.Netns); err != nil {
		tb.Fatalf("pod %s: %v", v.Key, err)
	}
	return v
}

// nodeNamed is the Env of e's node named name, nil when none is.
func (e *Env) nodeNamed(name string) *Env {
	for _, ne := range e.Nodes() {
		if ne.Node.Name == name {
			return ne
		}
	}
	return nil
}

// slingshotVars are the SLINGSHOT_* of an environment, never nil.
func slingshotVars(all map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range all {
		if strings.HasPrefix(k, "SLINGSHOT_") {
			out[k] = v
		}
	}
	return out
}

// CheckBound checks what every front end promises a running pod of nics
// NICs, in its container and in the node's driver: a VNI in
// SLINGSHOT_VNIS (with the device plugin, the same list in the env file
// as in the environment), and nics services admitting the pod's network
// namespace, each enabled, admitting that namespace alone (no other, no
// UID or GID, not open) and carrying exactly the container's VNIs, no
// more (another job's VNI would let the pod reach that job) and no fewer.
func CheckBound(tb testing.TB, v PodView, nics int) {
	tb.Helper()
	vnis := v.Env["SLINGSHOT_VNIS"]
	if v.JobVNI() == 0 {
		tb.Errorf("pod %s on %s: no VNI in SLINGSHOT_VNIS %q", v.Key, v.Node, vnis)
	}
	if v.File != nil && v.File["SLINGSHOT_VNIS"] != vnis {
		tb.Errorf("pod %s on %s: SLINGSHOT_VNIS %q in the environment, %q in %s", v.Key, v.Node, vnis, v.File["SLINGSHOT_VNIS"], ContainerEnvFile)
	}
	if len(v.Admitting) != nics {
		tb.Errorf("pod %s on %s: %d services admit its namespace %d, want %d: %+v", v.Key, v.Node, len(v.Admitting), v.Netns, nics, v.Admitting)
	}
	for _, s := range v.Admitting {
		if !s.Enabled || !s.OnlyNetns(v.Netns) || !slices.Equal(s.VNIs, v.VNIs) {
			tb.Errorf("pod %s on %s: service %s/%d enabled=%v open=%v uids=%v gids=%v netns=%v vnis=%v; want enabled, netns [%d] only, VNIs %v",
				v.Key, v.Node, s.NIC, s.ID, s.Enabled, s.Open, s.UIDs, s.GIDs, s.NetNS, s.VNIs, v.Netns, v.VNIs)
		}
	}
}

// CheckReported checks the agent's report (inspect) of a running pod's
// services, those the suite's front end ties to the pod (the device
// plugin names the pod in its services; with DRA the pod's environment
// names them): nics of them, each enabled, its one member the pod's
// network namespace, and carrying exactly the container's VNIs: the
// agent's record says what the driver holds.
func CheckReported(tb testing.TB, v PodView, reported []inspect.Service, nics int) {
	tb.Helper()
	if len(reported) != nics {
		tb.Errorf("pod %s on %s: the agent reports %d services of it, want %d: %+v", v.Key, v.Node, len(reported), nics, reported)
	}
	want := NetnsMember(v.Netns)
	for _, s := range reported {
		if !s.Enabled || !slices.Equal(s.Members, []string{want}) || !slices.Equal(s.VNIs, v.VNIs) {
			tb.Errorf("pod %s on %s: the agent reports service %s/%d enabled=%v members=%v vnis=%v; want enabled, members [%s], VNIs %v",
				v.Key, v.Node, s.NIC, s.ID, s.Enabled, s.Members, s.VNIs, want, v.VNIs)
		}
	}
}

// FirstVNI is the first VNI of a SLINGSHOT_VNIS list ("1024,7"): the
// job's (or the pod's own) VNI; 0 when the list has none.
func FirstVNI(list string) uint16 {
	first, _, _ := strings.Cut(list, ",")
	n, err := strconv.ParseUint(first, 10, 16)
	if err != nil {
		return 0
	}
	return uint16(n)
}

// NetnsMember is how the agent's report names a service's one member, the
// pod's network namespace inode: "netns=4026532500".
func NetnsMember(ino uint32) string { return fmt.Sprintf("netns=%d", ino) }

// DriverServices lists every service of every NIC of the node's simulated
// driver, as its state files hold them, the driver's own (the default and
// system services) included.
func (e *Env) DriverServices() ([]simstate.Service, error) {
	var out []simstate.Service
	for _, nic := range e.Machine.NICs {
		svcs, err := simstate.Read(e.SimStateDir, nic.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: services of %s: %w", e.Node.Name, nic.Name, err)
		}
		out = append(out, svcs...)
	}
	return out, nil
}

// ServicesAdmitting lists the node's services, as the driver holds them,
// that admit the network namespace ino: "cxi0/5". The driver's own are
// looked at too: one of them admitting a pod would be as wrong.
func (e *Env) ServicesAdmitting(ino uint32) ([]string, error) {
	svcs, err := e.DriverServices()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range svcs {
		if slices.Contains(s.NetNS, ino) {
			out = append(out, fmt.Sprintf("%s/%d", s.NIC, s.ID))
		}
	}
	return out, nil
}

// ServicesOf lists the node's services, as the driver holds them, that
// admit the network namespace ino, in NIC and ID order.
func (e *Env) ServicesOf(ino uint32) ([]simstate.Service, error) {
	svcs, err := e.DriverServices()
	if err != nil {
		return nil, err
	}
	var out []simstate.Service
	for _, s := range svcs {
		if slices.Contains(s.NetNS, ino) {
			out = append(out, s)
		}
	}
	return out, nil
}

// SandboxNetns waits (up to a minute) for a process of the pod with the
// given UID and returns its network namespace inode: the sandbox's, which
// exists before any container of the pod has started, so it names the
// namespace of a pod whose bind failed.
func SandboxNetns(ctx context.Context, uid string) (uint32, error) {
	var inode uint32
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		procs, err := PodProcesses(uid)
		if err != nil {
			return false, err
		}
		for _, p := range procs {
			if ino, err := netns.ParseNetnsLink(p.Netns); err == nil {
				inode = ino
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return 0, fmt.Errorf("pod %s: no sandbox process: %w", uid, err)
	}
	return inode, nil
}
