package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// TestMachineTypeAllocation serves a GPU machine type (2 GPUs and their
// nearest NIC per unit) and allocates one unit through the kubelet.
func TestMachineTypeAllocation(t *testing.T) {
	ctx := t.Context()
	n := newNodeSpec(t, "gpu-node", mocksysfs.Spec{NICs: 4, NUMANodes: 2, GPUs: 8, Seed: 7})
	writeConfig := func(mode string) {
		cfg := fmt.Sprintf(`podResources: {pollInterval: 100ms}
health: {pollInterval: 100ms}
cdi: {specDir: %s}
gpu:
  domain: hpe.com
  machineTypes:
  - {name: compute-xlarge, cpu: "32", memory: 256Gi, gpu: {type: nvidia, count: 2, family: H100}, nicsPerUnit: 1}
  nodePool:
  - {node: gpu-node, mode: %s, machineType: compute-xlarge}
`, n.CDIDir, mode)
		tmp := n.Config + ".tmp"
		if err := os.WriteFile(tmp, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, n.Config); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig("ready")
	n.StartKubelet(ctx)
	n.StartAgent()
	const mt = "hpe.com/compute-xlarge"
	capacity := func(res string, wantCap, wantAlloc int64) func() (bool, string) {
		return func() (bool, string) {
			c, a := n.Kubelet.Capacity(res)
			return c == wantCap && a == wantAlloc, fmt.Sprintf("%s %d/%d", res, c, a)
		}
	}
	eventually(t, 10*time.Second, "4 units", capacity(mt, 4, 4))
	// Every NIC belongs to a unit, so the NIC resource offers none.
	eventually(t, 10*time.Second, "no free NIC", capacity(nicResource, 0, 0))

	pod := newPodFor(mt, "ml", "trainer-0", 1, nil)
	netns := n.StartSandbox(pod)
	opts, err := n.Kubelet.Admit(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	o := opts["main"]
	var gpus, cxis []string
	for _, d := range o.Devices {
		base := filepath.Base(d.PathOnHost)
		switch {
		case strings.HasPrefix(base, "cxi"):
			cxis = append(cxis, base)
		case strings.HasPrefix(base, "nvidia") && base != "nvidiactl" && !strings.HasPrefix(base, "nvidia-uvm"):
			gpus = append(gpus, base)
		}
	}
	env := map[string]string{}
	for _, e := range o.Envs {
		env[e.Name] = e.Value
	}
	if len(gpus) != 2 || len(cxis) != 1 || env["NVIDIA_VISIBLE_DEVICES"] == "" || env["SLINGSHOT_DEVICES"] != cxis[0] {
		t.Fatalf("unit gave GPUs %v, NICs %v, env %v", gpus, cxis, env)
	}
	svcs := n.Services(cxis[0])
	if len(svcs) != 1 || svcs[0].Members[0].ID != netns || svcs[0].VNIs[0] < 1024 {
		t.Fatalf("services on %s = %+v", cxis[0], svcs)
	}
	// The unit's GPUs and NIC share a NUMA node.
	numa := map[int]bool{}
	for _, g := range n.Truth.GPUs {
		for _, name := range gpus {
			if fmt.Sprintf("nvidia%d", g.Minor) == name {
				numa[g.NUMANode] = true
			}
		}
	}
	for _, nic := range n.Truth.NICs {
		if nic.Name == cxis[0] {
			numa[nic.NUMANode] = true
		}
	}
	if len(numa) != 1 {
		t.Fatalf("unit spans NUMA nodes %v", numa)
	}

	// Maintenance: nothing allocatable, the running pod keeps its service.
	writeConfig("maintenance")
	eventually(t, 10*time.Second, "maintenance", capacity(mt, 4, 0))
	if len(n.Services(cxis[0])) != 1 {
		t.Fatal("maintenance touched a running pod's service")
	}
	writeConfig("ready")
	eventually(t, 10*time.Second, "ready again", capacity(mt, 4, 4))

	n.Kubelet.RemovePod(pod.UID)
	eventually(t, 5*time.Second, "unit service gone", func() (bool, string) {
		return len(n.Services(cxis[0])) == 0, "service left"
	})
}
