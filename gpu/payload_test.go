package gpu

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// carveMock writes a mock node, discovers it and carves units of count GPUs
// with one NIC each.
func carveMock(t *testing.T, spec mocksysfs.Spec, vendor string, count int) (*mocksysfs.Truth, *Carving) {
	t.Helper()
	truth := writeMock(t, spec)
	d, nics := discoverNode(t, truth)
	c, err := Carve(d.GPUs, nics, machineType(vendor, count, 1), CarveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return truth, c
}

func truthGPU(truth *mocksysfs.Truth, bdf string) mocksysfs.GPU {
	i := slices.IndexFunc(truth.GPUs, func(g mocksysfs.GPU) bool { return g.BDF == bdf })
	return truth.GPUs[i]
}

func TestPayloadNVIDIA(t *testing.T) {
	truth, c := carveMock(t, mocksysfs.Spec{NICs: 4, NUMANodes: 2, GPUs: 8}, "nvidia", 2)
	u0, u3 := c.Units[0], c.Units[3]
	ids := []string{u3.ID, u0.ID} // request order does not matter for GPUs
	devFS := os.DirFS(truth.DevRoot)

	var wantGPUs, wantIdx, wantUUID, wantCDIIdx, wantCDIUUID []string
	var wantDevs []DeviceNode
	for _, u := range []Unit{u0, u3} {
		for _, g := range u.GPUs {
			tg := truthGPU(truth, g.PCIAddress)
			wantGPUs = append(wantGPUs, g.PCIAddress)
			wantIdx = append(wantIdx, strconv.Itoa(tg.Minor)) // the mock's minors follow PCI order
			wantUUID = append(wantUUID, tg.UUID)
			wantCDIIdx = append(wantCDIIdx, "nvidia.com/gpu="+strconv.Itoa(tg.Minor))
			wantCDIUUID = append(wantCDIUUID, "nvidia.com/gpu="+tg.UUID)
			wantDevs = append(wantDevs, DeviceNode{HostPath: filepath.Join(truth.DevRoot, tg.DevNodes[0]),
				ContainerPath: "/dev/" + tg.DevNodes[0], Permissions: "rw"})
		}
	}
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		wantDevs = append(wantDevs, DeviceNode{HostPath: filepath.Join(truth.DevRoot, n), ContainerPath: "/dev/" + n, Permissions: "rw"})
	}
	wantNICs := append(u3.NICNames(), u0.NICNames()...)

	for _, tc := range []struct {
		name    string
		opts    PayloadOptions
		devs    []DeviceNode
		cdi     []string
		visible string
	}{
		{"device nodes by index", PayloadOptions{DevRoot: truth.DevRoot, DevFS: devFS}, wantDevs, nil, strings.Join(wantIdx, ",")},
		{"device nodes by UUID", PayloadOptions{DevRoot: truth.DevRoot, DevFS: devFS, Select: ByUUID}, wantDevs, nil, strings.Join(wantUUID, ",")},
		{"CDI by index", PayloadOptions{CDI: true}, nil, wantCDIIdx, ""},
		{"CDI by UUID", PayloadOptions{CDI: true, Select: ByUUID}, nil, wantCDIUUID, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := c.Payload(ids, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Devices, tc.devs) {
				t.Errorf("devices %+v\nwant %+v", p.Devices, tc.devs)
			}
			if !slices.Equal(p.CDIDevices, tc.cdi) {
				t.Errorf("CDI devices %v, want %v", p.CDIDevices, tc.cdi)
			}
			wantEnv := map[string]string{}
			if tc.visible != "" {
				wantEnv[EnvNVIDIAVisibleDevices] = tc.visible
			}
			if !maps.Equal(p.Env, wantEnv) {
				t.Errorf("env %v, want %v", p.Env, wantEnv)
			}
			if !slices.Equal(p.GPUs, wantGPUs) || !slices.Equal(p.NICs, wantNICs) {
				t.Errorf("GPUs %v NICs %v, want %v %v", p.GPUs, p.NICs, wantGPUs, wantNICs)
			}
		})
	}
}

func TestPayloadAMD(t *testing.T) {
	truth, c := carveMock(t, mocksysfs.Spec{NICs: 4, NUMANodes: 2, GPUs: 8, GPUVendor: mocksysfs.AMD}, "amd", 2)
	u := c.Units[1]
	p, err := c.Payload([]string{u.ID}, PayloadOptions{DevRoot: "/host/dev", DevFS: os.DirFS(truth.DevRoot), Select: ByUUID})
	if err != nil {
		t.Fatal(err)
	}
	var want []DeviceNode
	var cdi []string
	for _, g := range u.GPUs {
		tg := truthGPU(truth, g.PCIAddress)
		want = append(want, DeviceNode{HostPath: "/host/dev/" + tg.DevNodes[0], ContainerPath: "/dev/" + tg.DevNodes[0], Permissions: "rw"})
		cdi = append(cdi, "amd.com/gpu="+strconv.Itoa(tg.Minor)) // the mock's card numbers follow PCI order
	}
	want = append(want, DeviceNode{HostPath: "/host/dev/kfd", ContainerPath: "/dev/kfd", Permissions: "rw"})
	if !slices.Equal(p.Devices, want) {
		t.Errorf("devices %+v\nwant %+v", p.Devices, want)
	}
	// The mock writes no unique_id, so ROCm gets the container's own
	// indices even by UUID.
	wantEnv := map[string]string{EnvROCRVisibleDevices: "0,1", EnvHIPVisibleDevices: "0,1"}
	if !maps.Equal(p.Env, wantEnv) || len(p.CDIDevices) != 0 || !slices.Equal(p.NICs, u.NICNames()) {
		t.Errorf("env %v CDI %v NICs %v", p.Env, p.CDIDevices, p.NICs)
	}
	p, err = c.Payload([]string{u.ID}, PayloadOptions{CDI: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Devices) != 0 || !slices.Equal(p.CDIDevices, cdi) || !maps.Equal(p.Env, wantEnv) {
		t.Errorf("CDI payload %+v, want CDI %v env %v", p, cdi, wantEnv)
	}
}

// With unique_id (the switch builder writes it) ROCR_VISIBLE_DEVICES takes
// UUIDs, which stay right whatever the container sees.
func TestPayloadAMDByUUID(t *testing.T) {
	var minor, nic int
	sys, proc, cxiNICs := fakeNode(t, switchTopo(0, 0, "amd", "AMD Instinct MI210", []int{2}, []int{1}, &minor, &nic))
	d, err := Discover(os.DirFS(sys), os.DirFS(proc))
	if err != nil {
		t.Fatal(err)
	}
	nics, _ := NICsFromCXI(os.DirFS(sys), cxiNICs)
	c, err := Carve(d.GPUs, nics, machineType("amd", 2, 1), CarveOptions{})
	if err != nil || len(c.Units) != 1 {
		t.Fatalf("carve: %v, %+v", err, c)
	}
	for sel, want := range map[Selector]string{ByUUID: "GPU-000000000000abc0,GPU-000000000000abc1", ByIndex: "0,1"} {
		p, err := c.Payload([]string{c.Units[0].ID}, PayloadOptions{Select: sel})
		if err != nil {
			t.Fatal(err)
		}
		if p.Env[EnvROCRVisibleDevices] != want || p.Env[EnvHIPVisibleDevices] != "0,1" {
			t.Errorf("selector %d: env %v, want ROCR %s", sel, p.Env, want)
		}
	}
}

func TestPayloadRefuses(t *testing.T) {
	truth, c := carveMock(t, mocksysfs.Spec{NICs: 2, NUMANodes: 2, GPUs: 4}, "nvidia", 2)
	id := c.Units[0].ID
	if err := os.Remove(filepath.Join(truth.DevRoot, "nvidia-uvm-tools")); err != nil {
		t.Fatal(err)
	}
	noUUID := *c
	noUUID.Units = slices.Clone(c.Units)
	noUUID.Units[0].GPUs = slices.Clone(c.Units[0].GPUs)
	noUUID.Units[0].GPUs[1].UUID = ""
	noNode := *c
	noNode.Units = slices.Clone(c.Units)
	noNode.Units[0].GPUs = slices.Clone(c.Units[0].GPUs)
	noNode.Units[0].GPUs[0].DevNodes = nil
	for name, tc := range map[string]struct {
		c    *Carving
		ids  []string
		opts PayloadOptions
		want error
	}{
		"unknown unit":        {c, []string{id, "0000:99:00.0-x2-00000000"}, PayloadOptions{}, ErrUnknownUnit},
		"missing device node": {c, []string{id}, PayloadOptions{DevFS: os.DirFS(truth.DevRoot)}, ErrNoDeviceNode},
		"GPU without a node":  {&noNode, []string{id}, PayloadOptions{}, ErrNoDeviceNode},
		"UUID unknown":        {&noUUID, []string{id}, PayloadOptions{Select: ByUUID}, ErrNoUUID},
		"no IDs":              {c, nil, PayloadOptions{}, nil},
		"repeated ID":         {c, []string{id, id}, PayloadOptions{}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := tc.c.Payload(tc.ids, tc.opts)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("Payload = %+v, %v; want %v", p, err, tc.want)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	_, c := carveMock(t, mocksysfs.Spec{NICs: 4, NUMANodes: 2, GPUs: 8}, "nvidia", 2)
	id := func(i int) string { return c.Units[i].ID }
	for name, tc := range map[string]struct {
		allocated, reserved map[string]bool
		want                Usage
	}{
		"idle":                 {nil, nil, Usage{Maximum: 4}},
		"two used":             {map[string]bool{id(0): true, id(2): true}, nil, Usage{Maximum: 4, Used: 2}},
		"one of them reserved": {map[string]bool{id(0): true, id(2): true}, map[string]bool{id(2): true}, Usage{Maximum: 4, Used: 1, Reserved: 1}},
		"reserved, not held":   {nil, map[string]bool{id(1): true}, Usage{Maximum: 4}},
		"foreign IDs ignored":  {map[string]bool{"0000:99:00.0": true, id(3): true}, nil, Usage{Maximum: 4, Used: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			got := c.Usage(tc.allocated, tc.reserved)
			if got != tc.want {
				t.Errorf("Usage = %+v, want %+v", got, tc.want)
			}
			if got.Free() != tc.want.Maximum-tc.want.Used-tc.want.Reserved {
				t.Errorf("Free = %d", got.Free())
			}
		})
	}
}
