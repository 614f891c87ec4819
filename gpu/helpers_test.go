package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	cxisysfs "github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// writeMock writes a mock node under a fresh temporary directory.
func writeMock(tb testing.TB, spec mocksysfs.Spec) *mocksysfs.Truth {
	tb.Helper()
	truth, err := mocksysfs.Write(filepath.Join(tb.TempDir(), "node"), spec)
	if err != nil {
		tb.Fatalf("mocksysfs.Write: %v", err)
	}
	return truth
}

// discoverNode runs GPU and NIC discovery on a mock node the way the agent
// will: gpu.Discover, cxi/sysfs.Discover, NICsFromCXI.
func discoverNode(tb testing.TB, truth *mocksysfs.Truth) (*Discovery, []NIC) {
	tb.Helper()
	sys, proc := os.DirFS(truth.SysRoot), os.DirFS(truth.ProcRoot)
	d, err := Discover(sys, proc)
	if err != nil {
		tb.Fatalf("Discover: %v", err)
	}
	cd, err := cxisysfs.Discover(sys)
	if err != nil {
		tb.Fatalf("cxi sysfs.Discover: %v", err)
	}
	nics, errs := NICsFromCXI(sys, cd.NICs)
	if len(errs) > 0 {
		tb.Fatalf("NICsFromCXI: %v", errs)
	}
	return d, nics
}

// gpuDir resolves a mock GPU's PCI function directory on disk.
func gpuDir(tb testing.TB, truth *mocksysfs.Truth, bdf string) string {
	tb.Helper()
	p, err := filepath.EvalSymlinks(filepath.Join(truth.SysRoot, "bus", "pci", "devices", bdf))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// fakeDev is one PCI function of a hand-built topology.
type fakeDev struct {
	addr    string   // "0000:03:00.0"
	root    string   // "pci0000:00"
	bridges []string // root port first
	numa    int
	kind    string // "nvidia", "amd" or "nic"
	product string
	minor   int // NVIDIA minor, AMD card number
	nicName string
}

// fakeNode writes a sysfs (and procfs) tree with the PCIe switches the mock
// generator does not make: devices/<root>/<bridges...>/<addr> directories
// with class, vendor, device and numa_node, bus/pci/devices links, bridge
// functions of class 0x060400, NVIDIA information files and AMD
// product_name and drm/ children. NICs get only their PCI function; tests
// pass them to NICsFromCXI as cxi/sysfs NICs.
func fakeNode(tb testing.TB, devs []fakeDev) (sysDir, procDir string, nics []cxisysfs.NIC) {
	tb.Helper()
	dir := tb.TempDir()
	sysDir, procDir = filepath.Join(dir, "sys"), filepath.Join(dir, "proc")
	write := func(rel, content string) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	link := func(rel, target string) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		up, err := filepath.Rel(filepath.Dir(p), filepath.Join(dir, filepath.FromSlash(target)))
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.Symlink(up, p); err != nil && !os.IsExist(err) {
			tb.Fatal(err)
		}
	}
	pciFn := func(p, addr string, vendor, device uint16, class uint32, numa int) {
		write(p+"/vendor", fmt.Sprintf("0x%04x\n", vendor))
		write(p+"/device", fmt.Sprintf("0x%04x\n", device))
		write(p+"/class", fmt.Sprintf("0x%06x\n", class))
		write(p+"/numa_node", fmt.Sprintf("%d\n", numa))
		link("sys/bus/pci/devices/"+addr, p)
	}
	for _, d := range devs {
		p := "sys/devices/" + d.root
		for _, b := range d.bridges {
			p += "/" + b
			pciFn(p, b, 0x1000, 0xc030, 0x060400, d.numa)
		}
		p += "/" + d.addr
		switch d.kind {
		case "nvidia":
			pciFn(p, d.addr, VendorIDNVIDIA, 0x2330, 0x030200, d.numa)
			link(p+"/driver", "sys/bus/pci/drivers/nvidia")
			write(fmt.Sprintf("proc/driver/nvidia/gpus/%s/information", d.addr), fmt.Sprintf(
				"Model: \t\t %s\nIRQ:   \t\t 200\nGPU UUID: \t GPU-%08x-0000-4000-8000-%012x\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n",
				d.product, d.minor, d.minor, d.addr, d.minor))
		case "amd":
			pciFn(p, d.addr, VendorIDAMD, 0x740c, 0x038000, d.numa)
			link(p+"/driver", "sys/bus/pci/drivers/amdgpu")
			write(p+"/product_name", d.product+"\n")
			write(p+"/unique_id", fmt.Sprintf("%016x\n", 0xabc0+d.minor))
			write(fmt.Sprintf("%s/drm/card%d/dev", p, d.minor), fmt.Sprintf("226:%d\n", d.minor))
			write(fmt.Sprintf("%s/drm/renderD%d/dev", p, 128+d.minor), fmt.Sprintf("226:%d\n", 128+d.minor))
		case "nic":
			pciFn(p, d.addr, cxisysfs.VendorHPE, cxisysfs.DeviceCassini2PF, 0x020000, d.numa)
			nics = append(nics, cxisysfs.NIC{Name: d.nicName, PCIAddress: d.addr, NUMANode: d.numa})
		default:
			tb.Fatalf("fake device kind %q", d.kind)
		}
	}
	return sysDir, procDir, nics
}

// switchTopo returns the devices of one NUMA node with PCIe switches: root
// complex pci0000:<bus> with one root port per switch, each switch holding
// the given GPUs and NICs on its own downstream ports. gpusPer[i] and
// nicsPer[i] are switch i's counts. Minors and NIC names continue from
// *minor and *nic.
func switchTopo(bus, numa int, kind, product string, gpusPer, nicsPer []int, minor, nic *int) []fakeDev {
	root := fmt.Sprintf("pci0000:%02x", bus)
	var devs []fakeDev
	next := bus + 1
	for s := range gpusPer {
		rootPort := fmt.Sprintf("0000:%02x:%02x.0", bus, s+1)
		up := fmt.Sprintf("0000:%02x:00.0", next)
		down := next + 1
		port := 0
		add := func(kind, product string) {
			downPort := fmt.Sprintf("0000:%02x:%02x.0", down, port)
			addr := fmt.Sprintf("0000:%02x:00.0", down+1+port)
			d := fakeDev{addr: addr, root: root, bridges: []string{rootPort, up, downPort}, numa: numa, kind: kind, product: product}
			if kind == "nic" {
				d.nicName = fmt.Sprintf("cxi%d", *nic)
				*nic++
			} else {
				d.minor = *minor
				*minor++
			}
			devs = append(devs, d)
			port++
		}
		for range gpusPer[s] {
			add(kind, product)
		}
		for range nicsPer[s] {
			add("nic", "")
		}
		next = down + 1 + port
	}
	return devs
}
