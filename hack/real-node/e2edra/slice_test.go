package e2edra

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// TestDRAResourceSlice: the agent registered as a DRA plugin with the
// kubelet (its registration socket is in the kubelet's plugin registry),
// and the node's ResourceSlice of the driver, pool the node's name, lists
// each NIC of the mock machine as cxiN with the attributes the mock sysfs
// tree says.
func TestDRAResourceSlice(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	rs, err := env.WaitResourceSlices(ctx, env.PhysicalNICs())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := filepath.Glob(filepath.Join(env.Node.KubeletDir, "plugins_registry", "*"))
	if err != nil {
		t.Fatal(err)
	}
	registered := false
	for _, p := range reg {
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().Type() == os.ModeSocket && strings.Contains(filepath.Base(p), cluster.DRADriver) {
			registered = true
		}
	}
	if !registered {
		t.Errorf("no registration socket of %s in the kubelet's plugin registry: %v", cluster.DRADriver, reg)
	}
	devices := map[string]resourcev1.Device{}
	for _, s := range rs {
		if s.Spec.Pool.Name != env.Node.Name || s.Spec.NodeName == nil || *s.Spec.NodeName != env.Node.Name || s.Spec.Driver != cluster.DRADriver {
			t.Errorf("ResourceSlice %s: driver %s, pool %s, node %v; want driver %s, pool and node %s",
				s.Name, s.Spec.Driver, s.Spec.Pool.Name, s.Spec.NodeName, cluster.DRADriver, env.Node.Name)
		}
		for _, d := range s.Spec.Devices {
			devices[d.Name] = d
		}
	}
	for _, nic := range env.Machine.NICs {
		if nic.VF {
			continue
		}
		d, ok := devices[nic.Name]
		if !ok {
			t.Errorf("NIC %s not in the ResourceSlices: %v", nic.Name, keys(devices))
			continue
		}
		for _, c := range wantAttributes(nic) {
			got, ok := attribute(d, c.name)
			if !ok {
				t.Errorf("device %s: no attribute %s; want %s", d.Name, c.name, c.want)
			} else if got != c.want {
				t.Errorf("device %s: attribute %s = %s, want %s", d.Name, c.name, got, c.want)
			}
		}
		t.Logf("device %s: %s", d.Name, describeAttributes(d))
	}
}

type wantAttr struct{ name, want string }

// wantAttributes are a NIC's attributes as the mock sysfs tree says, each
// written as attrString writes the attribute's value.
func wantAttributes(nic mocksysfs.NIC) []wantAttr {
	speed := 0
	if nic.Properties.Link {
		speed = nic.Properties.SpeedMbps
	}
	major, _, _ := strings.Cut(nic.Properties.CassiniVersion, ".")
	return []wantAttr{
		{"type", "string:nic"},
		{"nid", fmt.Sprintf("int:%d", nic.Properties.NID)},
		{"linkSpeed", fmt.Sprintf("int:%d", speed)},
		{"cassiniVersion", "string:cassini" + major},
		{"hsnNetdev", "string:" + nic.NetDev},
		{"resource.kubernetes.io/pcieRoot", "string:" + nic.RootComplex},
		{"resource.kubernetes.io/pciBusID", "string:" + nic.PCIAddress},
		{"resource.kubernetes.io/numaNode", fmt.Sprintf("int:%d", nic.NUMANode)},
	}
}

// attribute returns a device's attribute by name, the driver's own
// either with its domain or without, as "int:5", "string:nic",
// "bool:true" or "version:1.0.0".
func attribute(d resourcev1.Device, name string) (string, bool) {
	a, ok := d.Attributes[resourcev1.QualifiedName(name)]
	if !ok && !strings.Contains(name, "/") {
		a, ok = d.Attributes[resourcev1.QualifiedName(cluster.DRADriver+"/"+name)]
	}
	if !ok {
		return "", false
	}
	return attrString(a), true
}

func attrString(a resourcev1.DeviceAttribute) string {
	switch {
	case a.IntValue != nil:
		return fmt.Sprintf("int:%d", *a.IntValue)
	case a.StringValue != nil:
		return "string:" + *a.StringValue
	case a.BoolValue != nil:
		return fmt.Sprintf("bool:%v", *a.BoolValue)
	case a.VersionValue != nil:
		return "version:" + *a.VersionValue
	}
	return "?"
}

func describeAttributes(d resourcev1.Device) string {
	var parts []string
	for k, a := range d.Attributes {
		parts = append(parts, string(k)+"="+attrString(a))
	}
	for k, c := range d.Capacity {
		parts = append(parts, "capacity "+string(k)+"="+c.Value.String())
	}
	for _, tn := range d.Taints {
		parts = append(parts, fmt.Sprintf("taint %s=%s:%s", tn.Key, tn.Value, tn.Effect))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func keys(m map[string]resourcev1.Device) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
