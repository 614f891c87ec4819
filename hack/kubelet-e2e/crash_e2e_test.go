package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/slingshot-k8s/slingshot/cxi"
)

// TestAgentKilledDuringChurn kills the agent with SIGKILL while pods come
// and go, restarts it, and checks that every live pod still has its
// services, with its own netns as member, and that no service is left
// without a live pod.
func TestAgentKilledDuringChurn(t *testing.T) {
	ctx := t.Context()
	n := newNode(t, "node-churn", 4, 2)
	// Eight shares per NIC: 32 pods can hold a NIC at once.
	cfg := fmt.Sprintf("nicResource: {sharesPerNIC: 8}\npodResources: {pollInterval: 100ms}\nhealth: {pollInterval: 100ms}\ncdi: {specDir: %s}\ncleanup: {busyInterval: 10ms, retryStuckEvery: 1s}\n", n.CDIDir)
	if err := os.WriteFile(n.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	n.StartKubelet(ctx)
	agent := n.StartAgent()
	eventually(t, 10*time.Second, "registered", func() (bool, string) {
		c, _ := n.Kubelet.Capacity(nicResource)
		return c == 32, itoa(c)
	})

	var (
		mu      sync.Mutex
		live    = map[string]*v1.Pod{}
		netnsOf = map[string]uint32{}
		ops     int
	)
	var killed sync.WaitGroup
	churn := func(ctx context.Context, rounds int, killAt int, kill func()) {
		for i := range rounds {
			if ctx.Err() != nil {
				return
			}
			mu.Lock()
			ops++
			doKill := ops == killAt
			mu.Unlock()
			if doKill {
				// The kill races the admission that follows: it may land
				// in the middle of a PreStart.
				killed.Go(kill)
			}
			// Admit one pod, and every third round remove the oldest.
			p := newPod("churn", fmt.Sprintf("p-%d", i), 1, nil)
			ns := n.StartSandbox(p)
			if _, err := n.Kubelet.Admit(ctx, p); err == nil {
				mu.Lock()
				live[string(p.UID)] = p
				netnsOf[string(p.UID)] = ns
				mu.Unlock()
			}
			if i%3 == 2 {
				mu.Lock()
				var oldest *v1.Pod
				for _, q := range live {
					if oldest == nil || q.Name < oldest.Name {
						oldest = q
					}
				}
				if oldest != nil {
					delete(live, string(oldest.UID))
				}
				mu.Unlock()
				if oldest != nil {
					n.Kubelet.RemovePod(oldest.UID)
				}
			}
		}
	}
	churn(ctx, 24, 14, agent.Kill)
	killed.Wait()
	t.Logf("churn done: %d live pods", len(live))

	n.StartAgent()
	eventually(t, 15*time.Second, "services match the live pods", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		byNetns := map[uint32]int{}
		total := 0
		for nic, svcs := range n.AllServices() {
			for _, s := range svcs {
				total++
				if len(s.Members) != 1 || s.Members[0].Type != cxi.MemberNetNS {
					return false, fmt.Sprintf("%s service %d members %v", nic, s.ID, s.Members)
				}
				byNetns[s.Members[0].ID]++
			}
		}
		for uid := range live {
			if byNetns[netnsOf[uid]] != 1 {
				return false, fmt.Sprintf("live pod %s has %d services", uid, byNetns[netnsOf[uid]])
			}
		}
		if total != len(live) {
			return false, fmt.Sprintf("%d services for %d live pods", total, len(live))
		}
		return true, ""
	})
	// Every pod admitted after the restart (and re-registration) binds as usual.
	eventually(t, 10*time.Second, "re-registered", func() (bool, string) {
		c, a := n.Kubelet.Capacity(nicResource)
		return c == 32 && a == 32, itoa(c) + "/" + itoa(a)
	})
	p := newPod("churn", "after-restart", 1, nil)
	n.StartSandbox(p)
	if _, err := n.Kubelet.Admit(ctx, p); err != nil {
		t.Fatalf("admit after restart: %v", err)
	}
}
