package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// TestKubeletEndToEnd runs the agent binary, with the simulated driver
// and the embedded controller, under the kubelet's own device manager and
// PodResources server, through a pod's life and a kubelet restart.
func TestKubeletEndToEnd(t *testing.T) {
	ctx := t.Context()
	n := newNode(t, "node-a", 4, 2)
	n.StartKubelet(ctx)
	agent := n.StartAgent()

	capacity := func(wantCap, wantAlloc int64) func() (bool, string) {
		return func() (bool, string) {
			c, a := n.Kubelet.Capacity(nicResource)
			return c == wantCap && a == wantAlloc, "capacity " + itoa(c) + " allocatable " + itoa(a)
		}
	}
	t.Run("registration", func(t *testing.T) {
		eventually(t, 10*time.Second, "4 NICs registered", capacity(4, 4))
	})

	t.Run("health", func(t *testing.T) {
		if err := mocksysfs.SetLink(n.Truth.Dir, "cxi2", false); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "link down lowers allocatable", capacity(4, 3))
		if err := mocksysfs.SetLink(n.Truth.Dir, "cxi2", true); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "link up restores allocatable", capacity(4, 4))
	})

	pod := newPod("team-a", "solver-0", 2, nil)
	t.Run("allocate and prestart", func(t *testing.T) {
		netns := n.StartSandbox(pod)
		opts, err := n.Kubelet.Admit(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		o := opts["main"]
		ids := n.Kubelet.Devices(pod, "main", nicResource)
		if len(ids) != 2 || len(o.Devices) != 2 {
			t.Fatalf("devices %v, device specs %+v; want 2", ids, o.Devices)
		}
		// Both NICs on one NUMA node: the kubelet took the plugin's preference.
		numa := map[int]bool{}
		var nicNames []string
		for _, d := range o.Devices {
			name := filepath.Base(d.PathOnHost)
			nicNames = append(nicNames, name)
			for _, nic := range n.Truth.NICs {
				if nic.Name == name {
					numa[nic.NUMANode] = true
				}
			}
		}
		if len(numa) != 1 {
			t.Errorf("NICs %v span %d NUMA nodes, want 1", nicNames, len(numa))
		}
		env := map[string]string{}
		for _, e := range o.Envs {
			env[e.Name] = e.Value
		}
		if env["SLINGSHOT_DEVICES"] != strings.Join(nicNames, ",") || env["SLINGSHOT_TCS"] != "0xa" {
			t.Errorf("env = %v, devices %v", env, nicNames)
		}
		if len(o.CDIDevices) != 1 || !strings.HasPrefix(o.CDIDevices[0].Name, nicResource+"=") {
			t.Errorf("CDI devices = %+v", o.CDIDevices)
		}
		if len(o.Mounts) != 1 || o.Mounts[0].ContainerPath != "/var/run/slingshot" {
			t.Fatalf("mounts = %+v", o.Mounts)
		}
		envFile, err := os.ReadFile(filepath.Join(o.Mounts[0].HostPath, "slingshot.env"))
		if err != nil {
			t.Fatalf("the per-container env file is not there when the container starts: %v", err)
		}
		if !strings.Contains(string(envFile), "SLINGSHOT_VNIS=") || !strings.Contains(string(envFile), "SLINGSHOT_SVC_IDS=") {
			t.Errorf("env file:\n%s", envFile)
		}
		// One service per NIC, only this pod's netns, on its VNI.
		var vni uint16
		for _, name := range nicNames {
			svcs := n.Services(name)
			if len(svcs) != 1 {
				t.Fatalf("%s services = %+v, want 1", name, svcs)
			}
			s := svcs[0]
			if len(s.Members) != 1 || s.Members[0] != (cxi.Member{Type: cxi.MemberNetNS, ID: netns}) {
				t.Errorf("%s members = %v, want only the pod's netns", name, s.Members)
			}
			if len(s.VNIs) != 1 || s.VNIs[0] < 1024 || vni != 0 && s.VNIs[0] != vni {
				t.Errorf("%s VNIs = %v", name, s.VNIs)
			}
			vni = s.VNIs[0]
			if !strings.Contains(string(envFile), "SLINGSHOT_VNIS="+itoa(int64(vni))) {
				t.Errorf("env file does not name VNI %d:\n%s", vni, envFile)
			}
		}
		eventually(t, 5*time.Second, "allocation shows in capacity", capacity(4, 4))
	})

	t.Run("request larger than capacity", func(t *testing.T) {
		big := newPod("team-b", "greedy", 5, nil)
		before := n.AllServices()
		if _, err := n.Kubelet.Admit(ctx, big); err == nil {
			t.Fatal("a pod asking for 5 of 4 NICs was admitted")
		}
		if len(n.Kubelet.Devices(big, "main", nicResource)) != 0 {
			t.Fatal("the refused pod holds devices")
		}
		if after := n.AllServices(); len(after) != len(before) {
			t.Fatalf("services changed by a refused pod: %v → %v", before, after)
		}
	})

	t.Run("kubelet restart", func(t *testing.T) {
		held := n.Kubelet.Devices(pod, "main", nicResource)
		if err := n.Kubelet.Stop(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		n.StartKubelet(ctx, pod)
		eventually(t, 10*time.Second, "capacity back after a kubelet restart", capacity(4, 4))
		t.Logf("capacity back %v after the kubelet restarted", time.Since(start))
		if got := n.Kubelet.Devices(pod, "main", nicResource); !slices.Equal(got, held) {
			t.Fatalf("devices after restart %v, want %v from the checkpoint", got, held)
		}
		// The container restarts: PreStart runs again and finds its services.
		before := n.AllServices()
		if _, err := n.Kubelet.StartContainers(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if after := n.AllServices(); !sameServices(before, after) {
			t.Fatalf("a container restart changed the services: %v → %v", before, after)
		}
	})

	t.Run("pod removal", func(t *testing.T) {
		start := time.Now()
		n.Kubelet.RemovePod(pod.UID)
		eventually(t, 2*time.Second, "services gone after the pod exits", func() (bool, string) {
			s := n.AllServices()
			return len(s) == 0, "services left on " + itoa(int64(len(s))) + " NICs"
		})
		t.Logf("services destroyed %v after the pod was removed", time.Since(start))
		eventually(t, 5*time.Second, "devices free", capacity(4, 4))
	})
	_ = agent
}

func sameServices(a, b map[string][]cxi.Service) bool {
	if len(a) != len(b) {
		return false
	}
	for nic, sa := range a {
		sb := b[nic]
		if len(sa) != len(sb) {
			return false
		}
		for i := range sa {
			if sa[i].ID != sb[i].ID {
				return false
			}
		}
	}
	return true
}
