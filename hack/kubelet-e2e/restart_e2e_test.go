package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKubeletRestartEmptyList: for about a second after a real kubelet
// restarts, its sources are not ready; PodResources lists no pod while the
// device manager still holds every allocation of its checkpoint, and
// frees none. The agent keeps the pod's services and env file through it
// and after, and cleans them up once the pod really goes: the device
// manager, nudged by the agent's device plugin, rewrites its checkpoint
// without the pod. (The old agent destroyed them at the first empty List.)
func TestKubeletRestartEmptyList(t *testing.T) {
	ctx := t.Context()
	n := newNode(t, "node-restart", 2, 1)
	n.StartKubelet(ctx)
	n.StartAgent()
	eventually(t, 10*time.Second, "registered", func() (bool, string) {
		c, a := n.Kubelet.Capacity(nicResource)
		return c == 2 && a == 2, itoa(c) + "/" + itoa(a)
	})
	pod := newPod("team-a", "solver-0", 1, nil)
	n.StartSandbox(pod)
	opts, err := n.Kubelet.Admit(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(opts["main"].Mounts[0].HostPath, "slingshot.env")
	before := n.AllServices()
	if len(before) != 1 {
		t.Fatalf("services %v, want one", before)
	}
	kept := func(step string) {
		t.Helper()
		if after := n.AllServices(); !sameServices(before, after) {
			t.Fatalf("%s: services %v, want %v", step, after, before)
		}
		if _, err := os.Stat(envFile); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	// listed waits until the agent (polling every 100 ms) has listed count
	// more times.
	listed := func(what string, count int64) {
		t.Helper()
		want := n.Kubelet.Lists() + count
		eventually(t, 10*time.Second, what, func() (bool, string) {
			got := n.Kubelet.Lists()
			return got >= want, itoa(got) + " Lists"
		})
	}

	if err := n.Kubelet.Stop(); err != nil {
		t.Fatal(err)
	}
	n.StartKubeletNotReady(ctx)
	listed("the agent lists the restarted kubelet", 10)
	kept("List empty")
	eventually(t, 10*time.Second, "registered again", func() (bool, string) {
		c, a := n.Kubelet.Capacity(nicResource)
		return c == 2 && a == 2, itoa(c) + "/" + itoa(a)
	})
	listed("the agent lists while registered, its nudges answered", 10)
	kept("List empty, device plugin registered")

	n.Kubelet.SourcesReady(pod)
	listed("the agent lists the refilled kubelet", 5)
	kept("List refilled")

	start := time.Now()
	n.Kubelet.RemovePod(pod.UID)
	eventually(t, 2*time.Second, "services gone after the pod exits", func() (bool, string) {
		s := n.AllServices()
		return len(s) == 0, "services left on " + itoa(int64(len(s))) + " NICs"
	})
	t.Logf("services destroyed %v after the pod was removed", time.Since(start).Round(time.Millisecond))
}
