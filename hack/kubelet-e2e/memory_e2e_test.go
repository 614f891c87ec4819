package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/kubelet-e2e/harness"
)

// TestAgentResidentMemory measures the agent's resident memory with 8 NICs
// and 100 pods bound, built without the race detector as it ships.
func TestAgentResidentMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second agent binary")
	}
	raceBin := harness.AgentBin
	if err := harness.BuildAgent(t.TempDir(), false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { harness.AgentBin = raceBin })

	ctx := t.Context()
	n := newNode(t, "node-mem", 8, 2)
	cfg := fmt.Sprintf("nicResource: {sharesPerNIC: 13}\npodResources: {pollInterval: 500ms}\ncdi: {specDir: %s}\n", n.CDIDir)
	if err := os.WriteFile(n.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	n.StartKubelet(ctx)
	agent := n.StartAgent()
	eventually(t, 10*time.Second, "registered", func() (bool, string) {
		c, _ := n.Kubelet.Capacity(nicResource)
		return c == 104, itoa(c)
	})
	idle, err := agent.RSS()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		p := newPod("mem", fmt.Sprintf("p-%03d", i), 1, nil)
		n.StartSandbox(p)
		if _, err := n.Kubelet.Admit(ctx, p); err != nil {
			t.Fatalf("admit pod %d: %v", i, err)
		}
	}
	total := 0
	for _, s := range n.AllServices() {
		total += len(s)
	}
	if total != 100 {
		t.Fatalf("%d services for 100 pods", total)
	}
	busy, err := agent.RSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent resident memory: %.1f MiB idle with 8 NICs, %.1f MiB with 100 pods bound", float64(idle)/(1<<20), float64(busy)/(1<<20))
	if busy > 256<<20 {
		t.Fatalf("agent uses %d MiB with 100 pods", busy>>20)
	}
}
