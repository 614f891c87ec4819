package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// WatchInterval is how often the restart tests' ServiceWatch polls the
// simulated driver and the node's processes.
const WatchInterval = 100 * time.Millisecond

// SandboxRemake is what differs, between the agent's front ends, in
// AgentDownSandboxesRemade: how the pods ask for NICs, and how a running
// pod is checked.
type SandboxRemake struct {
	// Pods makes in ns what the pods need (claim templates) and returns
	// the pods to run (AlwaysRestarting), each with a VNI of its own and
	// an e2e-job label of its own. Among them, some hold more than one NIC
	// and some share a NIC where the front end lets them, so that one
	// pod's namespace may be another's service's.
	Pods func(t *testing.T, ns string) []*corev1.Pod
	// CheckRunning checks a pod that runs, as the suite checks any pod of
	// its front end: before the first round and after each.
	CheckRunning func(t *testing.T, ctx context.Context, pod corev1.Pod)
}

// AgentDownSandboxesRemade (issue 32): with pods running bound, the agent
// is SIGKILLed and kept down (KillAgent), every pod's sandbox is made
// again (its pause process killed: the kubelet makes a new sandbox, in a
// new network namespace), and only then is the agent started. Then once
// more, the driver's services wiped while the agent is down (a driver
// reload, ReloadDriver).
//
// While the agent is down nothing can change a service, so a service
// still admits its pod's old namespace until the agent is back; what
// keeps that safe is the agent's pins (--pin-netns, Options.PinNetns):
// the old namespaces stay alive, so the kernel cannot hand their inodes
// to the new ones. So what is checked is:
//
//   - while the agent is down, a pin on the node holds each pod's old
//     namespace (Pins);
//   - from before the SIGKILL until the pods run again, at every poll of a
//     ServiceWatch (WatchInterval), no service admits a namespace that a
//     process of another pod, or the host, runs in: a service of one pod
//     never admits another pod's current namespace;
//   - once the agent is back and the pods run, every service of each pod
//     (by its VNI) admits exactly its current namespace, is enabled, and
//     there is one per NIC; and each pod passes r.CheckRunning.
func (e *Env) AgentDownSandboxesRemade(t *testing.T, ns string, r SandboxRemake) {
	t.Helper()
	ctx := t.Context()
	// The services made again get the lowest free IDs: earlier tests'
	// services still being torn down would free lower ones meanwhile.
	if err := e.WaitDriverQuiet(ctx); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, pod := range r.Pods(t, ns) {
		running, err := e.RunPod(ctx, ns, pod)
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, running)
	}
	for _, p := range pods {
		r.CheckRunning(t, ctx, p)
	}
	if t.Failed() {
		t.FailNow()
	}
	watched := e.WatchedPods(t, pods)
	for _, w := range watched {
		t.Logf("pod %s (uid %s): VNI %d, %d services", w.Key, w.UID, w.VNI, w.NICs)
	}
	for _, reload := range []bool{false, true} {
		name := "AgentKilled"
		if reload {
			name = "AgentKilledDriverReloaded"
		}
		if !t.Run(name, func(t *testing.T) { pods = e.remakeWhileDown(t, pods, watched, reload, r) }) {
			return
		}
	}
}

// remakeWhileDown is one round of AgentDownSandboxesRemade; it returns
// the pods as they run after it.
func (e *Env) remakeWhileDown(t *testing.T, pods []corev1.Pod, watched []WatchedPod, reload bool, r SandboxRemake) []corev1.Pod {
	ctx := t.Context()
	before := map[string]Sandbox{}
	for _, p := range pods {
		sb, ok, err := PodSandbox(string(p.UID))
		if err != nil || !ok {
			t.Fatalf("pod %s/%s: no sandbox (%v)", p.Namespace, p.Name, err)
		}
		before[string(p.UID)] = sb
	}
	w, err := e.WatchServices(ctx, WatchInterval, watched, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop() })

	down := e.KillAgent(t)
	t.Logf("agent pod %s, pid %d: SIGKILLed; the DaemonSet selects no node", down.Pod.Name, down.PID)
	pins, err := e.Pins()
	if err != nil {
		t.Error(err)
	}
	t.Logf("pins on the node while the agent is down: %v", pins)
	held := slices.Collect(maps.Values(pins))
	for _, wp := range watched {
		if old := before[wp.UID].Netns; !slices.Contains(held, old) {
			t.Errorf("while the agent is down, no pin on the node holds pod %s's namespace %d, which its services admit: once its sandbox is made again the kernel may give the inode to another pod's namespace (pins %v)", wp.Key, old, pins)
		}
	}
	if reload {
		gone, err := e.ReloadDriver()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("driver reloaded while the agent is down: services %v gone", gone)
	}

	// The new namespaces take the inodes the old sandboxes free, lowest
	// first, rather than whatever else the node freed before: without a
	// pin, one pod's new namespace gets another's old inode.
	var top uint32
	for _, sb := range before {
		top = max(top, sb.Netns)
	}
	holding, release, err := HoldFreeInodes(top, 100000)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	t.Logf("the %d free namespace inodes up to %d held", holding, top)
	for _, p := range pods {
		if _, err := KillSandbox(string(p.UID)); err != nil {
			t.Fatal(err)
		}
	}
	after := map[string]Sandbox{}
	for _, p := range pods {
		sb, err := WaitNewSandbox(ctx, string(p.UID), before[string(p.UID)])
		if err != nil {
			t.Fatalf("%v\n%s", err, e.Describe(ctx))
		}
		after[string(p.UID)] = sb
	}
	release()
	for _, wp := range watched {
		t.Logf("pod %s: sandbox made again while the agent is down: namespace %d, then %d", wp.Key, before[wp.UID].Netns, after[wp.UID].Netns)
		for _, other := range watched {
			if other.UID != wp.UID && after[wp.UID].Netns == before[other.UID].Netns {
				t.Logf("pod %s's new namespace has pod %s's old inode %d", wp.Key, other.Key, before[other.UID].Netns)
			}
		}
	}

	if err := down.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("agent started again, %s after the SIGKILL", time.Since(down.Killed).Round(time.Millisecond))
	for i, p := range pods {
		cur, _, err := e.WaitRunningAgain(ctx, p, before[string(p.UID)])
		if err != nil {
			t.Fatal(err)
		}
		pods[i] = cur
	}
	if err := e.waitBoundByVNI(ctx, watched); err != nil {
		t.Error(err)
	}
	w.Stop().Check(t, WatchInterval)
	for _, p := range pods {
		r.CheckRunning(t, ctx, p)
	}
	return pods
}

// waitBoundByVNI waits (up to two minutes) until every watched pod has
// one service per NIC carrying its VNI, each enabled and admitting
// exactly the namespace of the pod's current sandbox, and no other
// service carries its VNI.
func (e *Env) waitBoundByVNI(ctx context.Context, pods []WatchedPod) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		svcs, err := e.DriverServices()
		if err != nil {
			last = err.Error()
			return false, nil
		}
		var wrong []string
		for _, p := range pods {
			sb, ok, err := PodSandbox(p.UID)
			if err != nil || !ok {
				wrong = append(wrong, fmt.Sprintf("pod %s: no sandbox (%v)", p.Key, err))
				continue
			}
			var own []simstate.Service
			for _, s := range svcs {
				if slices.Contains(s.VNIs, p.VNI) {
					own = append(own, s)
				}
			}
			good := len(own) == p.NICs
			for _, s := range own {
				good = good && s.Enabled && s.OnlyNetns(sb.Netns)
			}
			if !good {
				wrong = append(wrong, fmt.Sprintf("pod %s (namespace %d, %d NICs): services of VNI %d %+v", p.Key, sb.Netns, p.NICs, p.VNI, own))
			}
		}
		last = strings.Join(wrong, "\n")
		return len(wrong) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the pods' services bound to their new namespaces: %w; last:\n%s\n%s", err, last, e.Describe(ctx))
	}
	return nil
}

// WaitDriverQuiet waits (up to three minutes) until the node's driver
// holds its own services only (DriverEmpty): the pods of earlier tests
// are gone and the agent has destroyed their services. A test that counts
// on the IDs the driver hands out, the lowest free, needs it: a teardown
// that frees lower IDs while it runs would move them.
func (e *Env) WaitDriverQuiet(ctx context.Context) error {
	_, err := e.WaitCleanedUp(ctx, Cleanup{Leftovers: []Leftover{e.DriverEmpty()}, Interval: 200 * time.Millisecond, Timeout: 3 * time.Minute})
	return err
}
