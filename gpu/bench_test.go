package gpu

import (
	"os"
	"testing"

	cxisysfs "github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// benchNode is 8 GPUs and 8 NICs on 2 NUMA nodes.
var benchNode = mocksysfs.Spec{NICs: 8, NUMANodes: 2, GPUs: 8, GPUModels: []string{"h100"}}

// BenchmarkDiscoverAndCarve is what the agent does at start-up for GPUs:
// GPU discovery, the NICs' topology (from a cxi/sysfs discovery done once
// for the NIC resource anyway) and carving, on a mock tree on disk.
func BenchmarkDiscoverAndCarve(b *testing.B) {
	truth := writeMock(b, benchNode)
	sys, proc := os.DirFS(truth.SysRoot), os.DirFS(truth.ProcRoot)
	cd, err := cxisysfs.Discover(sys)
	if err != nil {
		b.Fatal(err)
	}
	mt := machineType("nvidia", 2, 2)
	b.ReportAllocs()
	for b.Loop() {
		d, err := Discover(sys, proc)
		if err != nil {
			b.Fatal(err)
		}
		nics, _ := NICsFromCXI(sys, cd.NICs)
		c, err := Carve(d.GPUs, nics, mt, CarveOptions{})
		if err != nil || len(c.Units) != 4 {
			b.Fatalf("carve: %v, %d units", err, len(c.Units))
		}
	}
}

// BenchmarkDiscoverAndCarveWithNICDiscovery adds the cxi/sysfs discovery.
func BenchmarkDiscoverAndCarveWithNICDiscovery(b *testing.B) {
	truth := writeMock(b, benchNode)
	sys, proc := os.DirFS(truth.SysRoot), os.DirFS(truth.ProcRoot)
	mt := machineType("nvidia", 2, 2)
	b.ReportAllocs()
	for b.Loop() {
		d, err := Discover(sys, proc)
		if err != nil {
			b.Fatal(err)
		}
		cd, err := cxisysfs.Discover(sys)
		if err != nil {
			b.Fatal(err)
		}
		nics, _ := NICsFromCXI(sys, cd.NICs)
		if c, err := Carve(d.GPUs, nics, mt, CarveOptions{}); err != nil || len(c.Units) != 4 {
			b.Fatalf("carve: %v", err)
		}
	}
}

// BenchmarkCarve is carving alone, which is pure.
func BenchmarkCarve(b *testing.B) {
	truth := writeMock(b, benchNode)
	d, nics := discoverNode(b, truth)
	mt := machineType("nvidia", 2, 2)
	b.ReportAllocs()
	for b.Loop() {
		if c, err := Carve(d.GPUs, nics, mt, CarveOptions{}); err != nil || len(c.Units) != 4 {
			b.Fatalf("carve: %v", err)
		}
	}
}

// BenchmarkPayload is the Allocate path: one unit's payload.
func BenchmarkPayload(b *testing.B) {
	truth := writeMock(b, benchNode)
	d, nics := discoverNode(b, truth)
	c, err := Carve(d.GPUs, nics, machineType("nvidia", 2, 2), CarveOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ids := []string{c.Units[1].ID}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Payload(ids, PayloadOptions{Select: ByUUID}); err != nil {
			b.Fatal(err)
		}
	}
}
