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

	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// ContainerEnvFile is the agent's per-container env file as the container
// sees it (agent.ContainerDir + "/" + agent.EnvFileName); the device
// plugin's only: with DRA the values come through CDI alone.
const ContainerEnvFile = "/var/run/slingshot/slingshot.env"

// PodView is what a node's /proc shows of one running pod, whatever asked
// for its NICs: the network namespace its processes share and its
// workload's process. Each suite reads the rest from it in its own terms
// (the env file, the claims, the agent's report).
type PodView struct {
	Key  string // namespace/name
	UID  string
	Node string // the node it runs on
	// Netns is the pod's network namespace inode, as the host sees it.
	Netns uint32
	// App is the workload process (the test image's /workload).
	App Process
}

// ViewPod reads the pod's processes from the node. It fails tb when it
// cannot read them or finds no workload among them, and reports (without
// stopping) processes of the pod in two network namespaces: a service
// admitting one of them would not admit the other.
func ViewPod(tb testing.TB, p corev1.Pod) PodView {
	tb.Helper()
	v := PodView{Key: p.Namespace + "/" + p.Name, UID: string(p.UID), Node: p.Spec.NodeName}
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
	return v
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
