package e2emulti

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// The tests run in the order of this file: TestMultiNodeDeleted, last,
// takes the second node down for good.

// TestMultiJobSharesVNI: a Job with a pod on each node gets one VNI: the
// containers on both nodes have it first in SLINGSHOT_VNIS (environment
// and env file), each node's simulated driver has a service carrying it
// that admits only that node's pod, and the controller's one lease of it
// is held by both nodes. Another Job, also across both nodes, gets
// another VNI.
func TestMultiJobSharesVNI(t *testing.T) {
	needAPI(t, cluster.APIDevicePlugin)
	ns := env.TestNamespace(t, "shared")
	starts, err := env.WatchStarts(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer starts.Close()
	podsA := runSpread(t, ns, spread(cluster.Job("a", 2, 1)))
	a := jobVNIAcross(t, podsA)
	// The figure issue 25 asks of the two nodes (a goal, so quoted, not
	// asserted): how far apart the Job's pods started, as this test's
	// watch saw their containers running.
	var first, last time.Time
	for _, p := range podsA {
		_, at, err := starts.Wait(t.Context(), p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	t.Logf("job a: its pods on %d nodes started within %v of each other", len(podsA), last.Sub(first).Round(time.Millisecond))
	b := jobVNIAcross(t, runSpread(t, ns, spread(cluster.Job("b", 2, 1))))
	if a == b {
		t.Errorf("Jobs a and b share VNI %d", a)
	}
	t.Logf("job a: VNI %d on %v; job b: VNI %d on %v", a, allNodeNames(), b, allNodeNames())
}

// jobVNIAcross checks the pods of one Job, one per node: each bound, all
// on one VNI, whose lease every node holds. It returns the VNI.
func jobVNIAcross(t *testing.T, byNode map[string]corev1.Pod) uint16 {
	t.Helper()
	var vni uint16
	for _, name := range allNodeNames() {
		v := env.ViewPod(t, byNode[name])
		cluster.CheckBound(t, v, 1)
		if vni != 0 && v.JobVNI() != vni {
			t.Errorf("pod %s on %s has VNI %d (SLINGSHOT_VNIS %q); its Job's pod on another node has %d", v.Key, name, v.JobVNI(), v.Env["SLINGSHOT_VNIS"], vni)
		}
		vni = v.JobVNI()
	}
	if got := holders(lease(t, vni)); !slices.Equal(got, allNodeNames()) {
		t.Errorf("VNI %d: lease held by %v, want %v", vni, got, allNodeNames())
	}
	return vni
}

// TestMultiPodVNIFromNodeSlices: pods with pod-scoped VNIs (annotation
// slingshot.hpe.com/vni: pod), one on each node, get VNIs of their own,
// each from its node's slice of the controller's pod VNI pool; the
// nodes' slices are disjoint.
func TestMultiPodVNIFromNodeSlices(t *testing.T) {
	needAPI(t, cluster.APIDevicePlugin)
	ns := env.TestNamespace(t, "podvni")
	pods := runSpread(t, ns, withVNIScope(spread(cluster.Job("own", 2, 1)), "pod"))
	resp, err := env.Slices(t.Context(), podVNIPool, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint16]string{}
	var used []*apiv1.Slice
	for _, name := range allNodeNames() {
		v := env.ViewPod(t, pods[name])
		cluster.CheckBound(t, v, 1)
		if other, ok := seen[v.JobVNI()]; ok {
			t.Errorf("pod-scoped VNI %d on %s and %s", v.JobVNI(), other, name)
		}
		seen[v.JobVNI()] = name
		var in *apiv1.Slice
		for _, s := range resp.Slices {
			if uint32(v.JobVNI()) >= s.VniFirst && uint32(v.JobVNI()) <= s.VniLast {
				in = s
			}
		}
		if in == nil || in.Node != name {
			t.Errorf("pod %s on %s: VNI %d in slice %v, want one leased to %s; slices %v", v.Key, name, v.JobVNI(), in, name, resp.Slices)
			continue
		}
		t.Logf("pod %s on %s: VNI %d from slice %d [%d-%d] of %s", v.Key, name, v.JobVNI(), in.Index, in.VniFirst, in.VniLast, in.Node)
		used = append(used, in)
	}
	for i := range used {
		for _, o := range used[i+1:] {
			if used[i].Index == o.Index || (used[i].VniFirst <= o.VniLast && o.VniFirst <= used[i].VniLast) {
				t.Errorf("slices of %s [%d-%d] and %s [%d-%d] overlap", used[i].Node, used[i].VniFirst, used[i].VniLast, o.Node, o.VniFirst, o.VniLast)
			}
		}
	}
}

// nodeSnapshot is what must not change on a node while another node's
// agent dies: its services, its pods and the leases it holds.
type nodeSnapshot struct {
	services map[string]simstate.Service // by NIC/ID
	pods     map[string]string           // by UID: namespace/name, phase and restarts
	holds    map[string]uint32           // lease key → VNI, of the leases the node holds
}

func snapshot(t *testing.T, ne *cluster.Env) nodeSnapshot {
	t.Helper()
	s := nodeSnapshot{services: map[string]simstate.Service{}, pods: map[string]string{}, holds: map[string]uint32{}}
	for _, svc := range nodeServices(t, ne) {
		s.services[fmt.Sprintf("%s/%d", svc.NIC, svc.ID)] = svc
	}
	list, err := env.Node.Client.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + ne.Node.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		s.pods[string(p.UID)] = fmt.Sprintf("%s/%s %s restarts=%d", p.Namespace, p.Name, p.Status.Phase, restarts(p))
	}
	vnis, err := env.VNIs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range vnis.Leases {
		if slices.Contains(l.Nodes, ne.Node.Name) {
			s.holds[l.Key] = l.Vni
		}
	}
	return s
}

// lost lists what of before is missing or changed in after; what after
// has beyond it (a new pod's) is not looked at.
func (before nodeSnapshot) lost(after nodeSnapshot) []string {
	var out []string
	for k, s := range before.services {
		a, ok := after.services[k]
		if !ok || a.Enabled != s.Enabled || !slices.Equal(a.VNIs, s.VNIs) || !slices.Equal(a.NetNS, s.NetNS) {
			out = append(out, fmt.Sprintf("service %s: %+v, now %+v (present %v)", k, s, a, ok))
		}
	}
	for uid, p := range before.pods {
		if after.pods[uid] != p {
			out = append(out, fmt.Sprintf("pod %s: %q, now %q", uid, p, after.pods[uid]))
		}
	}
	for k, v := range before.holds {
		if a, ok := after.holds[k]; !ok || a != v {
			out = append(out, fmt.Sprintf("hold of lease %s (VNI %d): now VNI %d, held %v", k, v, a, ok))
		}
	}
	return out
}

// TestMultiAgentKilled: the second node's agent is SIGKILLed. Nothing
// changes on the first node: its services, its pods (the agent's and the
// controller's among them: none restarted) and the leases it holds stay
// as they were, and a new pod there starts, bound to a VNI of its own,
// while the second node's agent is down or restarting. The second node's
// agent comes back (the kubelet restarts its container) and its pod's
// service is still bound.
func TestMultiAgentKilled(t *testing.T) {
	needAPI(t, cluster.APIDevicePlugin)
	ctx := t.Context()
	n1, n2 := env.Nodes()[0], env.Nodes()[1]
	ns := env.TestNamespace(t, "agentkill")
	steady := runSpread(t, ns, spread(cluster.Job("steady", 2, 1)))
	// The earlier tests' pods end after them, and with them their
	// services and holds: the first node is looked at once only the
	// release's pods and this test's remain, and only this test's
	// service and hold.
	steadyNetns := env.ViewPod(t, steady[n1.Node.Name]).Netns
	waitFor(t, 3*time.Minute, n1.Node.Name+" settled", func() (bool, string) {
		s := snapshot(t, n1)
		var others []string
		for _, p := range s.pods {
			if !strings.HasPrefix(p, ns+"/") && !strings.HasPrefix(p, cluster.Namespace+"/") {
				others = append(others, p)
			}
		}
		svcs := slices.Collect(maps.Values(s.services))
		return len(others) == 0 && len(svcs) == 1 && svcs[0].OnlyNetns(steadyNetns) && len(s.holds) == 1,
			fmt.Sprintf("other pods %v, services %v, holds %v", others, svcs, s.holds)
	})
	before := snapshot(t, n1)
	agentBefore := agentPod(t, n2.Node.Name)
	pid := agentProcess(t, n2)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s's agent (pid %d): %v", n2.Node.Name, pid, err)
	}
	killed := time.Now()

	during, err := env.RunJob(ctx, ns, onNode(cluster.Job("during", 1, 1), n1.Node.Name))
	if err != nil {
		t.Fatal(err)
	}
	started := time.Since(killed)
	v := env.ViewPod(t, during[0])
	cluster.CheckBound(t, v, 1)

	var back time.Duration
	waitFor(t, 3*time.Minute, n2.Node.Name+"'s agent restarted and ready", func() (bool, string) {
		p := agentPod(t, n2.Node.Name)
		back = time.Since(killed)
		return restarts(p) > restarts(agentBefore) && ready(p), fmt.Sprintf("restarts %d (were %d), ready %v", restarts(p), restarts(agentBefore), ready(p))
	})
	if lost := before.lost(snapshot(t, n1)); len(lost) > 0 {
		t.Errorf("%s changed when %s's agent was killed:\n%v", n1.Node.Name, n2.Node.Name, lost)
	}
	cluster.CheckBound(t, env.ViewPod(t, steady[n2.Node.Name]), 1)
	t.Logf("%s: %d services, %d pods, %d leases unchanged; a new pod ran there on VNI %d %s after the kill; %s's agent seen ready again %s after it",
		n1.Node.Name, len(before.services), len(before.pods), len(before.holds), v.JobVNI(), started.Round(time.Millisecond),
		n2.Node.Name, back.Round(time.Millisecond))
}

// TestMultiJobDeletedFreesVNI: a Job across both nodes is deleted with its
// pods orphaned, and the pods then go one node at a time. While the second
// node's pod runs, the first node's service of the VNI is destroyed, the
// second's remains, the lease stays held by the second node alone and is
// not quarantined, and a new Job gets another VNI. Once the second pod
// goes, its service goes too and the VNI is freed into quarantine. A Job
// deleted the usual way (its pods with it) frees its VNI on both nodes
// the same way; a Job started while both VNIs are quarantined gets
// neither.
func TestMultiJobDeletedFreesVNI(t *testing.T) {
	needAPI(t, cluster.APIDevicePlugin)
	ctx := t.Context()
	n1, n2 := env.Nodes()[0], env.Nodes()[1]
	ns := env.TestNamespace(t, "jobgone")
	pods := runSpread(t, ns, spread(cluster.Job("gone", 2, 1)))
	vni := jobVNIAcross(t, pods)

	jobs := env.Node.Client.BatchV1().Jobs(ns)
	if err := jobs.Delete(ctx, "gone", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "job gone deleted, its pods orphaned", func() (bool, string) {
		_, err := jobs.Get(ctx, "gone", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	deletePod(t, pods[n1.Node.Name])
	if _, err := n1.WaitCleanedUp(ctx, cluster.Cleanup{
		VNI: vni, Leftovers: []cluster.Leftover{n1.DriverVNIGone(vni)},
		Interval: 200 * time.Millisecond, Timeout: 2 * time.Minute,
	}); err != nil {
		t.Fatalf("VNI %d released by %s: %v", vni, n1.Node.Name, err)
	}
	if h := holders(lease(t, vni)); !slices.Equal(h, []string{n2.Node.Name}) {
		t.Errorf("VNI %d held by %v once %s released it, want %s alone", vni, h, n1.Node.Name, n2.Node.Name)
	}
	if s2 := servicesWithVNI(t, n2, vni); len(s2) != 1 {
		t.Errorf("%s: services of VNI %d %v while its pod runs, want 1", n2.Node.Name, vni, s2)
	}
	if quarantined(t, vni) {
		t.Errorf("VNI %d quarantined while %s holds it", vni, n2.Node.Name)
	}
	next := jobVNIAcross(t, runSpread(t, ns, spread(cluster.Job("next", 2, 1))))
	if next == vni {
		t.Errorf("job next got VNI %d, which %s still holds", next, n2.Node.Name)
	}

	deletePod(t, pods[n2.Node.Name])
	waitFreed(t, vni)

	if err := env.DeleteJob(ctx, ns, "next"); err != nil {
		t.Fatal(err)
	}
	waitFreed(t, next)
	third := jobVNIAcross(t, runSpread(t, ns, spread(cluster.Job("third", 2, 1))))
	if third == vni || third == next {
		t.Errorf("job third got VNI %d; quarantined: %d, %d", third, vni, next)
	}
	t.Logf("job gone: VNI %d, freed after both nodes released it; job next: VNI %d (while %d was held), freed with its pods; job third: VNI %d", vni, next, vni, third)
}

// waitFreed waits until no node has a service of vni, no lease carries it
// and the controller holds it in quarantine.
func waitFreed(t *testing.T, vni uint16) {
	t.Helper()
	var left []cluster.Leftover
	for _, ne := range env.Nodes() {
		left = append(left, ne.DriverVNIGone(vni))
	}
	left = append(left, env.VNIsReleased(vni), env.VNIsQuarantined(vni))
	if _, err := env.WaitCleanedUp(t.Context(), cluster.Cleanup{Leftovers: left, Interval: 200 * time.Millisecond, Timeout: 2 * time.Minute}); err != nil {
		t.Fatalf("VNI %d freed on every node and quarantined: %v", vni, err)
	}
}

// deletePod deletes the pod and waits until it is gone from the API.
func deletePod(t *testing.T, p corev1.Pod) {
	t.Helper()
	c := env.Node.Client.CoreV1().Pods(p.Namespace)
	if err := c.Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "pod "+p.Name+" gone", func() (bool, string) {
		_, err := c.Get(t.Context(), p.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

// TestMultiNodeDeleted: the second node holds a Job's lease (beside the
// first) and a slice of the pod VNI pool, with nothing allocated from it.
// The node stops (kubelet, containerd, agent and pods end with its
// namespaces) and its Node object is deleted. Until the controller's
// --slice-grace has passed the node keeps its hold on the lease and its
// open slice; then it loses both, and the first node's hold stays.
// It runs last: the second node stays down.
func TestMultiNodeDeleted(t *testing.T) {
	needAPI(t, cluster.APIDevicePlugin)
	ctx := t.Context()
	n1, n2 := env.Nodes()[0], env.Nodes()[1]
	ns := env.TestNamespace(t, "nodegone")

	// A pod-scoped pod on the second node leases it a slice of the pod
	// VNI pool; once the pod is gone and a heartbeat has said so, nothing
	// is allocated from it, so the grace alone keeps it.
	if _, err := env.RunJob(ctx, ns, withVNIScope(onNode(cluster.Job("own", 1, 1), n2.Node.Name), "pod")); err != nil {
		t.Fatal(err)
	}
	if err := env.DeleteJob(ctx, ns, "own"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPodsGone(ctx, ns, "e2e-job=own"); err != nil {
		t.Fatal(err)
	}
	// The pod's VNI goes back to the node's pool once the agent's cleanup
	// is done, and the controller learns it from the node's next
	// heartbeat. A report read before that heartbeat may predate the
	// cleanup, and a node stopped before it would keep a slice it no
	// longer uses (a deleted node's slice with ids last reported
	// allocated is kept): so wait for the cleanup, then for a renewal
	// after it (a later expiry) reporting nothing allocated.
	waitFor(t, 2*time.Minute, n2.Node.Name+"'s agent done with the pod", func() (bool, string) {
		rep, err := n2.Inspect(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range rep.Pods {
			if p.Namespace == ns {
				return false, fmt.Sprintf("pod %s %s", p.Name, p.State)
			}
		}
		return true, "no pod of " + ns
	})
	renewedAfter := int64(-1)
	if resp, err := env.Slices(ctx, podVNIPool, n2.Node.Name); err == nil {
		for _, s := range resp.Slices {
			renewedAfter = max(renewedAfter, s.ExpiresUnixMs)
		}
	}
	var open []uint32
	waitFor(t, 2*time.Minute, n2.Node.Name+"'s pod VNI slices reported empty after the cleanup", func() (bool, string) {
		resp, err := env.Slices(ctx, podVNIPool, n2.Node.Name)
		if err != nil {
			return false, err.Error()
		}
		open = open[:0]
		for _, s := range resp.Slices {
			if s.ExpiresUnixMs <= renewedAfter {
				return false, fmt.Sprintf("slice %d: not renewed since the cleanup", s.Index)
			}
			if s.Allocated != 0 {
				return false, fmt.Sprintf("slice %d: %d allocated", s.Index, s.Allocated)
			}
			if s.Open {
				open = append(open, s.Index)
			}
		}
		return len(resp.Slices) > 0, fmt.Sprintf("%d slices", len(resp.Slices))
	})
	span := runSpread(t, ns, withBackoff(spread(cluster.Job("span", 2, 1)), 6))
	vni := jobVNIAcross(t, span)

	n2.Node.Stop()
	// The controller sees the deletion after asked and before deleted: the
	// holds may go no sooner than the grace after asked, and must stay
	// until the grace after deleted.
	asked := time.Now()
	if err := env.Node.Client.CoreV1().Nodes().Delete(ctx, n2.Node.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()

	// Within the grace (less a margin for the controller's view of the
	// deletion): every hold stays.
	checks := 0
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for time.Since(deleted) < sliceGrace-2*time.Second {
		if h := holders(lease(t, vni)); !slices.Equal(h, allNodeNames()) {
			t.Fatalf("%s after %s was deleted (grace %s): VNI %d held by %v, want %v", time.Since(deleted).Round(time.Millisecond), n2.Node.Name, sliceGrace, vni, h, allNodeNames())
		}
		resp, err := env.Slices(ctx, podVNIPool, n2.Node.Name)
		if err != nil {
			t.Fatal(err)
		}
		var held []uint32
		for _, s := range resp.Slices {
			held = append(held, s.Index)
		}
		for _, i := range open {
			if !slices.Contains(held, i) {
				t.Fatalf("%s after %s was deleted (grace %s): its open slice %d reclaimed; it holds %v", time.Since(deleted).Round(time.Millisecond), n2.Node.Name, sliceGrace, i, held)
			}
		}
		checks++
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
		}
	}

	var dropped time.Duration
	waitFor(t, sliceGrace+time.Minute, n2.Node.Name+"'s holds dropped", func() (bool, string) {
		h := holders(lease(t, vni))
		resp, err := env.Slices(ctx, podVNIPool, n2.Node.Name)
		if err != nil {
			return false, err.Error()
		}
		dropped = time.Since(asked)
		return slices.Equal(h, []string{n1.Node.Name}) && len(resp.Slices) == 0, fmt.Sprintf("VNI %d held by %v; %s holds %d slices", vni, h, n2.Node.Name, len(resp.Slices))
	})
	if dropped < sliceGrace {
		t.Errorf("%s's holds dropped %s after its deletion, within the grace %s", n2.Node.Name, dropped, sliceGrace)
	}
	cluster.CheckBound(t, env.ViewPod(t, span[n1.Node.Name]), 1)
	t.Logf("%s deleted: VNI %d and open slices %v kept through %d checks within the grace %s, dropped %s after the deletion was asked; %s's pod still bound",
		n2.Node.Name, vni, open, checks, sliceGrace, dropped.Round(time.Millisecond), n1.Node.Name)
}
