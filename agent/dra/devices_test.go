package dra

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestDevices(t *testing.T) {
	devs := Devices(testDriver, []NIC{
		{Name: "cxi0", PCIAddress: "0000:21:00.0", PCIeRoot: "pci0000:20", NUMANode: 1, NID: 0x12, LinkSpeedMbps: 200000,
			Cassini: "cassini2", NetDev: "hsn0", Services: 255, TLEs: 2048},
		{Name: "cxi1", PCIAddress: "0000:41:00.0", NUMANode: -1, Cassini: "cassini1", Unhealthy: "link down: carrier lost"},
	})
	if len(devs) != 2 {
		t.Fatalf("%d devices, want 2", len(devs))
	}
	a := devs[0].Attributes
	str := func(d resourceapi.Device, k resourceapi.QualifiedName) string {
		if v := d.Attributes[k].StringValue; v != nil {
			return *v
		}
		return ""
	}
	if str(devs[0], "type") != "nic" || *a["nid"].IntValue != 0x12 || *a["linkSpeed"].IntValue != 200000 ||
		str(devs[0], "hsnNetdev") != "hsn0" || str(devs[0], "resource.kubernetes.io/pcieRoot") != "pci0000:20" ||
		str(devs[0], "resource.kubernetes.io/pciBusID") != "0000:21:00.0" || *a["resource.kubernetes.io/numaNode"].IntValue != 1 ||
		str(devs[0], "cassiniVersion") != "cassini2" {
		t.Errorf("cxi0 attributes = %+v", a)
	}
	for name, want := range map[resourceapi.QualifiedName]int64{"services": 255, "lePools": 15, "tlePools": 3} {
		if q := devs[0].Capacity[name].Value; q.Value() != want {
			t.Errorf("cxi0 %s capacity = %v, want %d", name, q.String(), want)
		}
	}
	// cxi0's free services are known: claims share it, one service each
	// by default, up to all of them; TLEs only where asked for; of its LE
	// and TLE pools (15 and 3 free for services) a claim takes one where
	// it asks.
	if m := devs[0].AllowMultipleAllocations; m == nil || !*m {
		t.Error("cxi0 is not shared among claims")
	}
	for name, want := range map[resourceapi.QualifiedName][4]int64{"services": {1, 1, 255, 1}, "tles": {0, 0, 2048, 1}, "lePools": {0, 0, 1, 1}, "tlePools": {0, 0, 1, 1}} {
		p := devs[0].Capacity[name].RequestPolicy
		if p == nil || p.Default == nil || p.ValidRange == nil || p.ValidRange.Min == nil || p.ValidRange.Max == nil || p.ValidRange.Step == nil {
			t.Errorf("cxi0 %s: request policy %+v, want default, min, max and step", name, p)
			continue
		}
		got := [4]int64{p.Default.Value(), p.ValidRange.Min.Value(), p.ValidRange.Max.Value(), p.ValidRange.Step.Value()}
		if got != want {
			t.Errorf("cxi0 %s: request policy default, min, max, step = %v, want %v", name, got, want)
		}
	}
	// cxi1's are not: one claim at a time, as without the gate.
	if devs[1].AllowMultipleAllocations != nil || devs[1].Capacity != nil {
		t.Errorf("cxi1, whose services are unknown, is shared or has capacities: %v %+v", devs[1].AllowMultipleAllocations, devs[1].Capacity)
	}
	if len(devs[0].Taints) != 0 {
		t.Errorf("healthy cxi0 tainted: %+v", devs[0].Taints)
	}
	if _, ok := devs[1].Attributes["resource.kubernetes.io/pcieRoot"]; ok {
		t.Error("cxi1 has a pcieRoot though it is unknown")
	}
	if _, ok := devs[1].Attributes["resource.kubernetes.io/numaNode"]; ok {
		t.Error("cxi1 has a NUMA node though it is unknown")
	}
	want := resourceapi.DeviceTaint{Key: testDriver + "/unhealthy", Value: "link-down-carrier-lost", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	if len(devs[1].Taints) != 1 || devs[1].Taints[0] != want {
		t.Errorf("cxi1 taints = %+v, want %+v", devs[1].Taints, want)
	}
	for _, d := range devs {
		if err := checkDeviceName(d.Name); err != nil {
			t.Error(err)
		}
	}
}

// Issue 24, defect 6: against a kubelet that has not made
// plugins/<driver>/, the agent exited at start; it makes the directories.
func TestDefect6PluginDirectoriesMade(t *testing.T) {
	kubelet := t.TempDir()
	registry, data, err := pluginDirs(kubelet, testDriver)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{registry, data} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("%s: %v, want a directory", d, err)
		}
	}
	if data != filepath.Join(kubelet, "plugins", testDriver) {
		t.Fatalf("data directory %s", data)
	}
	if _, _, err := pluginDirs(kubelet, testDriver); err != nil {
		t.Fatalf("second start: %v", err)
	}
}

// TestAwaitVNILease: every device carries the binding condition and the
// failure condition the controller writes, nothing else changed.
func TestAwaitVNILease(t *testing.T) {
	devs := Devices(testDriver, []NIC{{Name: "cxi0", Services: 8}, {Name: "cxi1"}})
	want := Devices(testDriver, []NIC{{Name: "cxi0", Services: 8}, {Name: "cxi1"}})
	AwaitVNILease(devs)
	for i, d := range devs {
		if fmt.Sprint(d.BindingConditions) != "[VNILeased]" || fmt.Sprint(d.BindingFailureConditions) != "[VNILeaseFailed]" {
			t.Errorf("device %s: binding conditions %v, failure conditions %v", d.Name, d.BindingConditions, d.BindingFailureConditions)
		}
		d.BindingConditions, d.BindingFailureConditions = nil, nil
		if !reflect.DeepEqual(d, want[i]) {
			t.Errorf("device %s changed beyond its conditions: %+v, want %+v", d.Name, d, want[i])
		}
	}
}
