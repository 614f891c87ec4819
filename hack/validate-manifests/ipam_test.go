package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// agentDaemonSet renders values and returns the agent's DaemonSet and the
// nicResource section of its configuration file.
func agentDaemonSet(t *testing.T, values map[string]any) (*appsv1.DaemonSet, map[string]any) {
	t.Helper()
	objs := renderObjects(t, values)
	o, ok := objs["DaemonSet/slingshot-agent"]
	if !ok {
		t.Fatalf("no DaemonSet/slingshot-agent among %d objects", len(objs))
	}
	var ds appsv1.DaemonSet
	if err := json.Unmarshal(o.JSON, &ds); err != nil {
		t.Fatal(err)
	}
	cm, ok := objs["ConfigMap/slingshot-agent"]
	if !ok {
		t.Fatal("no ConfigMap/slingshot-agent")
	}
	data, _ := cm.Map["data"].(map[string]any)
	text, _ := data["config.yaml"].(string)
	var cfg struct {
		NICResource map[string]any `json:"nicResource"`
	}
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	return &ds, cfg.NICResource
}

func hostPathOf(spec corev1.PodSpec, volume string) *corev1.HostPathVolumeSource {
	for _, v := range spec.Volumes {
		if v.Name == volume {
			return v.HostPath
		}
	}
	return nil
}

func mountOf(c corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

// The IPAM socket and the CNI plugin's install in the agent's DaemonSet:
// by default the init container installs the plugin into /opt/cni/bin
// with nothing but root, the agent serves the socket in a host directory
// mounted at the host's path, and each can be moved or turned off.
func TestRenderIPAM(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		// wantBin is the host's CNI bin dir, "" for no install.
		wantBin string
		// wantSocket is the agent's --ipam-socket.
		wantSocket string
	}{
		{name: "defaults", wantBin: "/opt/cni/bin", wantSocket: "/run/slingshot-agent/ipam.sock"},
		{name: "moved", values: map[string]any{"ipam": map[string]any{"cniBinDir": "/var/lib/cni/bin/", "socket": "/var/run/slingshot/ipam.sock"}},
			wantBin: "/var/lib/cni/bin", wantSocket: "/var/run/slingshot/ipam.sock"},
		{name: "no install", values: map[string]any{"ipam": map[string]any{"installPlugin": false}}, wantSocket: "/run/slingshot-agent/ipam.sock"},
		{name: "no socket", values: map[string]any{"ipam": map[string]any{"socket": ""}}, wantBin: "/opt/cni/bin"},
		{name: "neither, and the bin dir is not checked", values: map[string]any{"ipam": map[string]any{"socket": "", "installPlugin": false, "cniBinDir": ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, _ := agentDaemonSet(t, tc.values)
			spec := ds.Spec.Template.Spec
			agent := spec.Containers[0]
			if !slices.Contains(agent.Args, "--ipam-socket="+tc.wantSocket) {
				t.Errorf("agent args %q, want --ipam-socket=%s", agent.Args, tc.wantSocket)
			}
			if mountOf(agent, "cni-bin") != "" {
				t.Errorf("the agent mounts the CNI bin dir; only the init container should")
			}
			if tc.wantSocket == "" {
				if hostPathOf(spec, "ipam-socket") != nil || mountOf(agent, "ipam-socket") != "" {
					t.Errorf("no socket, but the socket's directory is mounted")
				}
			} else {
				dir := tc.wantSocket[:strings.LastIndex(tc.wantSocket, "/")]
				hp := hostPathOf(spec, "ipam-socket")
				if hp == nil || hp.Path != dir || hp.Type == nil || *hp.Type != corev1.HostPathDirectoryOrCreate || mountOf(agent, "ipam-socket") != dir {
					t.Errorf("socket dir: hostPath %+v mounted at %q; want %s (DirectoryOrCreate) at the same path", hp, mountOf(agent, "ipam-socket"), dir)
				}
			}
			if tc.wantBin == "" {
				if len(spec.InitContainers) != 0 || hostPathOf(spec, "cni-bin") != nil {
					t.Errorf("no install, but init containers %v and cni-bin %+v", spec.InitContainers, hostPathOf(spec, "cni-bin"))
				}
				return
			}
			if len(spec.InitContainers) != 1 {
				t.Fatalf("%d init containers, want the plugin's install", len(spec.InitContainers))
			}
			ic := spec.InitContainers[0]
			want := []string{"/usr/local/bin/slingshot-ipam", "install", "/host" + tc.wantBin}
			if !slices.Equal(ic.Command, want) || len(ic.Args) != 0 || ic.Image != agent.Image {
				t.Errorf("init container runs %q %q from %s; want %q from the agent's image %s", ic.Command, ic.Args, ic.Image, want, agent.Image)
			}
			hp := hostPathOf(spec, "cni-bin")
			if hp == nil || hp.Path != tc.wantBin || hp.Type == nil || *hp.Type != corev1.HostPathDirectoryOrCreate || mountOf(ic, "cni-bin") != "/host"+tc.wantBin {
				t.Errorf("cni-bin: hostPath %+v mounted at %q; want %s (DirectoryOrCreate) at /host%s", hp, mountOf(ic, "cni-bin"), tc.wantBin, tc.wantBin)
			}
			sc := ic.SecurityContext
			if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
				t.Errorf("init container's securityContext %+v: want root with no capability, no privilege, a read-only root", sc)
			}
			if len(ic.VolumeMounts) != 1 {
				t.Errorf("init container mounts %v; want the CNI bin dir alone", ic.VolumeMounts)
			}
		})
	}
}

// agent.hsnInterface renders into the agent's configuration only when
// enabled (the agent's default is off), with the MTU only when set.
func TestRenderHSNInterface(t *testing.T) {
	pools := map[string]any{"ipPools": "hsn0=10.150.0.0/16:/24"}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   map[string]any // nil: no hsnInterface in the config
	}{
		{name: "off by default"},
		{name: "on", values: map[string]any{"agent": map[string]any{"hsnInterface": map[string]any{"enabled": true}}, "controller": pools},
			want: map[string]any{"enabled": true, "mode": "macvlan", "name": "hsn0", "pool": "hsn0"}},
		{name: "every field", values: map[string]any{
			"agent":      map[string]any{"hsnInterface": map[string]any{"enabled": true, "mode": "ipvlan", "name": "net1", "pool": "fabric", "mtu": 9000}},
			"controller": map[string]any{"ipPools": "hsn0=10.150.0.0/16:/24, fabric=fd00::/48:/64"}},
			want: map[string]any{"enabled": true, "mode": "ipvlan", "name": "net1", "pool": "fabric", "mtu": float64(9000)}},
		{name: "embedded controller: pools not checked", values: map[string]any{
			"agent": map[string]any{"hsnInterface": map[string]any{"enabled": true}}, "controller": map[string]any{"enabled": false}},
			want: map[string]any{"enabled": true, "mode": "macvlan", "name": "hsn0", "pool": "hsn0"}},
		{name: "values win over agent.config", values: map[string]any{
			"agent": map[string]any{"hsnInterface": map[string]any{"enabled": true},
				"config": map[string]any{"nicResource": map[string]any{"hsnInterface": map[string]any{"mode": "ipvlan"}}}},
			"controller": pools},
			want: map[string]any{"enabled": true, "mode": "macvlan", "name": "hsn0", "pool": "hsn0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, nic := agentDaemonSet(t, tc.values)
			got, ok := nic["hsnInterface"].(map[string]any)
			if tc.want == nil {
				if ok {
					t.Errorf("nicResource.hsnInterface %v rendered; want none", got)
				}
				return
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tc.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("nicResource.hsnInterface %s, want %s", gotJSON, wantJSON)
			}
			if nic["name"] != "hpe.com/cxi" {
				t.Errorf("nicResource.name %v: the rest of nicResource was lost", nic["name"])
			}
		})
	}
}

// The unprivileged agent gets CAP_NET_ADMIN exactly when it makes the
// pods' hsn interfaces: the links are made over rtnetlink.
func TestRenderHSNInterfaceNetAdmin(t *testing.T) {
	for _, on := range []bool{false, true} {
		values := map[string]any{
			"agent":      map[string]any{"cxiDriver": "sim", "privileged": false, "hsnInterface": map[string]any{"enabled": on}},
			"controller": map[string]any{"ipPools": "hsn0=10.150.0.0/16:/24"},
		}
		ds, _ := agentDaemonSet(t, values)
		var caps []corev1.Capability
		for _, c := range ds.Spec.Template.Spec.Containers {
			if sc := c.SecurityContext; c.Name == "agent" && sc != nil && sc.Capabilities != nil {
				caps = sc.Capabilities.Add
			}
		}
		if got := slices.Contains(caps, "NET_ADMIN"); got != on {
			t.Errorf("hsnInterface.enabled=%v: agent adds %v, want NET_ADMIN %v", on, caps, on)
		}
	}
}

// The IPAM and hsn interface values the chart refuses, each naming the
// value at fault.
func TestRenderRefusesIPAM(t *testing.T) {
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	hsn := func(h map[string]any, pools string) map[string]any {
		h["enabled"] = true
		return map[string]any{"agent": map[string]any{"hsnInterface": h}, "controller": map[string]any{"ipPools": pools}}
	}
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"relative socket":        {map[string]any{"ipam": map[string]any{"socket": "run/ipam.sock"}}, `ipam.socket "run/ipam.sock": want an absolute path`},
		"socket in /":            {map[string]any{"ipam": map[string]any{"socket": "/ipam.sock"}}, "in a directory other than /"},
		"socket too long":        {map[string]any{"ipam": map[string]any{"socket": "/run/" + strings.Repeat("s", 103)}}, "at most 107 bytes"},
		"no bin dir":             {map[string]any{"ipam": map[string]any{"cniBinDir": ""}}, `ipam.cniBinDir "": want the node's CNI bin dir`},
		"relative bin dir":       {map[string]any{"ipam": map[string]any{"cniBinDir": "opt/cni/bin"}}, `ipam.cniBinDir "opt/cni/bin"`},
		"bin dir /":              {map[string]any{"ipam": map[string]any{"cniBinDir": "//"}}, `ipam.cniBinDir "//"`},
		"hsn mode":               {hsn(map[string]any{"mode": "bridge"}, "hsn0=10.150.0.0/16:/24"), `agent.hsnInterface.mode "bridge": want macvlan or ipvlan`},
		"hsn without pools":      {hsn(map[string]any{}, ""), `agent.hsnInterface.pool "hsn0" is not a pool of controller.ipPools ""`},
		"hsn pool not in pools":  {hsn(map[string]any{"pool": "hsn1"}, "hsn0=10.150.0.0/16:/24"), `agent.hsnInterface.pool "hsn1" is not a pool`},
		"hsn pool is a prefix":   {hsn(map[string]any{"pool": "hsn"}, "hsn0=10.150.0.0/16:/24"), `agent.hsnInterface.pool "hsn" is not a pool`},
		"hsn pool is a netblock": {hsn(map[string]any{"pool": "10.150.0.0/16:/24"}, "hsn0=10.150.0.0/16:/24"), "is not a pool"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render(ch, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v; want one containing %q", err, tc.want)
			}
		})
	}
}
