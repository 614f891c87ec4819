package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

func TestDiscoverMatchesTruth(t *testing.T) {
	cases := map[string]mocksysfs.Spec{
		"8 NICs on 2 NUMA nodes with 8 GPUs": {NICs: 8, NUMANodes: 2, GPUs: 8, Seed: 1},
		"8 NICs, another shuffle":            {NICs: 8, NUMANodes: 2, Seed: 42},
		"16 NICs on 4 NUMA nodes":            {NICs: 16, NUMANodes: 4, GPUs: 4, GPUVendor: mocksysfs.AMD, Seed: 3},
		"2 PFs with 3 VFs each":              {NICs: 2, NUMANodes: 1, VFsPerNIC: 3, Seed: 5},
		"Cassini-1":                          {NICs: 4, NUMANodes: 2, Generation: mocksysfs.Cassini1, Seed: 9},
		"Cassini-1 with 2 VFs each":          {NICs: 2, NUMANodes: 2, Generation: mocksysfs.Cassini1, VFsPerNIC: 2, Seed: 10},
		"one NIC":                            {NICs: 1, NUMANodes: 1},
		"GPUs only":                          {GPUs: 2, NUMANodes: 2},
	}
	for name, spec := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the trees are written to disk; overlap the I/O
			truth := writeTree(t, spec)
			d, err := Discover(os.DirFS(truth.SysRoot))
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if err := d.Err(); err != nil {
				t.Errorf("problems in a clean tree: %v", err)
			}
			if len(d.NICs) != len(truth.NICs) {
				t.Fatalf("found %d NICs, wrote %d", len(d.NICs), len(truth.NICs))
			}
			shuffled := false
			for i, got := range d.NICs {
				sameNIC(t, got, expectedNIC(truth.NICs[i]))
				if !got.Healthy {
					t.Errorf("%s unhealthy in a clean tree", got.Name)
				}
				if got.NetDev != nil && got.NetDev.Name != fmt.Sprintf("hsn%d", got.Index) {
					shuffled = true
				}
			}
			if spec.NICs > 1 && !shuffled {
				t.Errorf("every hsnN matched cxiN by index; the generator should shuffle them")
			}
		})
	}
}

func TestDiscoverFaults(t *testing.T) {
	type problem struct {
		path     string // relative to the sysfs root; "" skips the check
		sentinel error
	}
	cases := []struct {
		name     string
		fault    mocksysfs.Fault
		problems []problem // in the order discovery reads
		healthy  bool
		check    func(t *testing.T, n NIC)
	}{
		{
			name:     "missing nid",
			fault:    mocksysfs.MissingFile(2, "device/properties/nid"),
			problems: []problem{{"class/cxi/cxi2/device/properties/nid", ErrMissing}},
		},
		{
			name:     "garbage link",
			fault:    mocksysfs.Garbage(2, "device/properties/link"),
			problems: []problem{{"class/cxi/cxi2/device/properties/link", ErrInvalidValue}},
		},
		{
			name:     "nid beyond 32 bits",
			fault:    mocksysfs.Fault{Kind: mocksysfs.FaultGarbage, NIC: 2, Path: "device/properties/nid", Value: "0x100000000\n"},
			problems: []problem{{"class/cxi/cxi2/device/properties/nid", ErrInvalidValue}},
		},
		{
			name:     "not a Cassini",
			fault:    mocksysfs.Fault{Kind: mocksysfs.FaultGarbage, NIC: 2, Path: "device/device", Value: "0x1234\n"},
			problems: []problem{{"class/cxi/cxi2/device/device", ErrInvalidValue}},
		},
		{
			name:     "unknown cassini_version",
			fault:    mocksysfs.Fault{Kind: mocksysfs.FaultGarbage, NIC: 2, Path: "device/properties/cassini_version", Value: "unknown\n"},
			problems: []problem{{"class/cxi/cxi2/device/properties/cassini_version", ErrInvalidValue}},
		},
		{
			name:     "missing device link",
			fault:    mocksysfs.MissingFile(2, "device"),
			problems: []problem{{"class/cxi/cxi2/device", ErrMissing}},
			check: func(t *testing.T, n NIC) {
				if n.PCIAddress != "" || n.NetDev != nil {
					t.Errorf("without a device link: PCI address %q, netdev %v; want none", n.PCIAddress, n.NetDev)
				}
			},
		},
		{
			name:  "missing properties directory",
			fault: mocksysfs.MissingFile(2, "device/properties"),
			problems: []problem{
				{"class/cxi/cxi2/device/properties/nid", ErrMissing},
				{"class/cxi/cxi2/device/properties/pid_bits", ErrMissing},
				{"class/cxi/cxi2/device/properties/pid_count", ErrMissing},
				{"class/cxi/cxi2/device/properties/pid_granule", ErrMissing},
				{"class/cxi/cxi2/device/properties/link", ErrMissing},
				{"class/cxi/cxi2/device/properties/speed", ErrMissing},
				{"class/cxi/cxi2/device/properties/pct_eq", ErrMissing},
				{"class/cxi/cxi2/device/properties/cassini_version", ErrMissing},
				{"class/cxi/cxi2/device/properties/num_ptes", ErrMissing},
				{"class/cxi/cxi2/device/properties/num_txqs", ErrMissing},
				{"class/cxi/cxi2/device/properties/num_tgqs", ErrMissing},
				{"class/cxi/cxi2/device/properties/num_eqs", ErrMissing},
				{"class/cxi/cxi2/device/properties/num_cts", ErrMissing},
				{"class/cxi/cxi2/device/properties/num_acs", ErrMissing},
				{"class/cxi/cxi2/device/properties/num_tles", ErrMissing},
				{"class/cxi/cxi2/device/properties/num_les", ErrMissing},
			},
		},
		{
			name:     "garbage numa_node",
			fault:    mocksysfs.Garbage(2, "device/numa_node"),
			problems: []problem{{"class/cxi/cxi2/device/numa_node", ErrInvalidValue}},
		},
		{
			name:     "garbage FRU description",
			fault:    mocksysfs.Garbage(2, "device/fru/description"),
			problems: []problem{{"class/cxi/cxi2/device/fru/description", ErrInvalidValue}},
		},
		{
			name:     "garbage netdev MAC",
			fault:    mocksysfs.Garbage(2, "netdev/address"),
			problems: []problem{{"", ErrInvalidValue}},
		},
		{
			name:     "missing netdev operstate",
			fault:    mocksysfs.MissingFile(2, "netdev/operstate"),
			problems: []problem{{"", ErrMissing}},
		},
		{
			name:    "link down",
			fault:   mocksysfs.LinkDown(2),
			healthy: false,
			check: func(t *testing.T, n NIC) {
				if n.Properties.Link || n.NetDev.OperState != OperStateDown || n.NetDev.SpeedMbps != -1 {
					t.Errorf("link %v, operstate %q, netdev speed %d; want false, down, -1",
						n.Properties.Link, n.NetDev.OperState, n.NetDev.SpeedMbps)
				}
			},
		},
		{
			name:    "no retry handler",
			fault:   mocksysfs.NoRetryHandler(2),
			healthy: true,
			check: func(t *testing.T, n NIC) {
				if n.Properties.RetryHandlerRunning() {
					t.Errorf("pct_eq %d: retry handler reported running", n.Properties.PCTEq)
				}
			},
		},
		{
			name:    "optional firmware version missing",
			fault:   mocksysfs.MissingFile(2, "device/uc"),
			healthy: true,
			check: func(t *testing.T, n NIC) {
				if n.FirmwareVersion != "" {
					t.Errorf("firmware version %q, want empty", n.FirmwareVersion)
				}
			},
		},
		{
			name:    "optional rgids_avail missing",
			fault:   mocksysfs.MissingFile(2, "device/properties/rgids_avail"),
			healthy: true,
			check: func(t *testing.T, n NIC) {
				if n.Properties.RGIDsAvail != -1 {
					t.Errorf("rgids_avail %d, want -1", n.Properties.RGIDsAvail)
				}
			},
		},
		{
			name:    "optional numa_node missing",
			fault:   mocksysfs.MissingFile(2, "device/numa_node"),
			healthy: true,
			check: func(t *testing.T, n NIC) {
				if n.NUMANode != -1 {
					t.Errorf("NUMA node %d, want -1", n.NUMANode)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			truth := writeTree(t, mocksysfs.Spec{NICs: 4, NUMANodes: 2, Faults: []mocksysfs.Fault{c.fault}, Seed: 11})
			d, err := Discover(os.DirFS(truth.SysRoot))
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if len(d.NICs) != 4 || len(d.Problems) != 0 {
				t.Fatalf("found %d NICs and problems %v; want 4 NICs and none", len(d.NICs), d.Problems)
			}
			for i, n := range d.NICs {
				if i != 2 {
					sameNIC(t, n, expectedNIC(truth.NICs[i]))
					if !n.Healthy || len(n.Problems) > 0 {
						t.Errorf("sibling %s: healthy %v, problems %v", n.Name, n.Healthy, n.Problems)
					}
				}
			}
			n := d.NICs[2]
			// A NIC with problems is never healthy.
			if wantHealthy := c.healthy && len(c.problems) == 0; n.Healthy != wantHealthy {
				t.Errorf("healthy %v, want %v (problems %v)", n.Healthy, wantHealthy, n.Problems)
			}
			if len(n.Problems) != len(c.problems) {
				t.Fatalf("problems %v, want %d", n.Problems, len(c.problems))
			}
			for i, want := range c.problems {
				err := n.Problems[i]
				var ae *AttrError
				if !errors.As(err, &ae) {
					t.Errorf("problem %v is not an *AttrError", err)
					continue
				}
				if want.path != "" && ae.Path != want.path {
					t.Errorf("problem %d names %q, want %q", i, ae.Path, want.path)
				}
				if !errors.Is(err, want.sentinel) {
					t.Errorf("problem %v is not %v", err, want.sentinel)
				}
			}
			if c.fault.Path != "" && len(c.problems) > 0 && c.problems[0].path == "" {
				// netdev faults: the file is named through the netdev.
				want := "class/net/" + truth.NICs[2].NetDev + "/" + c.fault.Path[len("netdev/"):]
				if got := problemPaths(t, n.Problems); !slices.Contains(got, want) {
					t.Errorf("problems %v do not name %s", got, want)
				}
			}
			if c.check != nil {
				c.check(t, n)
			}
		})
	}
}

func TestDiscoverTestdata(t *testing.T) {
	mac := func(s string) net.HardwareAddr {
		m, err := net.ParseMAC(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	maxima := ResourceMaxima{PTEs: 2048, TXQs: 1024, TGQs: 512, EQs: 2047, CTs: 2047, ACs: 1022, TLEs: 2048, LEs: 16384}
	props := func(nid uint32, link bool, pctEq uint32, version string, rgids int) Properties {
		return Properties{NID: nid, PIDBits: 9, PIDCount: 511, PIDGranule: 256, Link: link,
			SpeedMbps: 200000, PCTEq: pctEq, CassiniVersion: version, Max: maxima, RGIDsAvail: rgids}
	}
	cases := []struct {
		dir            string
		want           []NIC
		problems       map[string][]string // NIC name to the problem paths
		sentinels      map[string][]error
		globalProblems []string
	}{
		{
			dir: "testdata/two-nics",
			want: []NIC{
				{Name: "cxi0", Index: 0, Path: "class/cxi/cxi0", PCIAddress: "0000:4b:00.0",
					VendorID: 0x1590, DeviceID: 0x0371, Generation: Cassini2, NUMANode: 0, Driver: "cxi_ss1",
					Properties: props(0x7ea, true, 3, "2.0", 254), FirmwareVersion: "1.5.41",
					FRUDescription: "400Gb 1P NIC Mezz",
					NetDev: &NetDev{Name: "hsn1", OperState: "up", SpeedMbps: 200000,
						MAC: mac("02:00:00:00:07:ea"), AddrAssignType: 3},
					Healthy: true},
				{Name: "cxi1", Index: 1, Path: "class/cxi/cxi1", PCIAddress: "0000:96:00.0",
					VendorID: 0x1590, DeviceID: 0x0371, Generation: Cassini2, NUMANode: -1, Driver: "cxi_ss1",
					Properties: props(0x542b1, false, 4, "2.0", -1),
					NetDev: &NetDev{Name: "hsn0", OperState: "down", SpeedMbps: -1,
						MAC: mac("02:00:00:05:42:b1"), AddrAssignType: 3},
					Healthy: false},
			},
		},
		{
			dir: "testdata/cassini1-broken",
			want: []NIC{
				{Name: "cxi0", Index: 0, Path: "class/cxi/cxi0", PCIAddress: "0000:21:00.0",
					VendorID: 0x17db, DeviceID: 0x0501, Generation: Cassini1, NUMANode: 1, Driver: "cxi_ss1",
					Properties: props(0x1200, true, 2, "1.1", 254), FirmwareVersion: "1.5.41",
					FRUDescription: "200Gb 1P NIC Mezz",
					NetDev: &NetDev{Name: "hsn0", OperState: "up", SpeedMbps: 200000,
						MAC: mac("02:00:00:00:12:00"), AddrAssignType: 3},
					Healthy: true},
				{Name: "cxi1", Index: 1, Path: "class/cxi/cxi1", PCIAddress: "0000:22:00.0",
					VendorID: 0x17db, DeviceID: 0x0501, Generation: Cassini1, NUMANode: 1, Driver: "cxi_ss1",
					Properties: Properties{PIDCount: 511, PIDGranule: 256, Link: true, SpeedMbps: 200000,
						PCTEq: 5, CassiniVersion: "1.1", Max: maxima, RGIDsAvail: 254},
					NetDev: &NetDev{Name: "hsn1", SpeedMbps: 200000, MAC: mac("02:00:00:00:12:01"), AddrAssignType: 3}},
				{Name: "cxi2", Index: 2, Path: "class/cxi_user/cxi2", PCIAddress: "0000:23:00.0",
					NUMANode: -1, Properties: Properties{RGIDsAvail: -1}},
			},
			problems: map[string][]string{
				"cxi1": {"class/cxi/cxi1/device/properties/nid", "class/cxi/cxi1/device/properties/pid_bits",
					"class/net/hsn1/operstate"},
				"cxi2": {"class/cxi_user/cxi2/device"},
			},
			sentinels: map[string][]error{
				"cxi1": {ErrInvalidValue, ErrMissing, ErrMissing},
				"cxi2": {ErrMissing},
			},
			globalProblems: []string{"class/cxi/bogus"},
		},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.dir), func(t *testing.T) {
			for fsName, fsys := range map[string]fs.FS{
				"DirFS": os.DirFS(c.dir),
				"MapFS": loadMapFS(t, c.dir),
			} {
				d, err := Discover(fsys)
				if err != nil {
					t.Fatalf("%s: Discover: %v", fsName, err)
				}
				if len(d.NICs) != len(c.want) {
					t.Fatalf("%s: found %d NICs, want %d", fsName, len(d.NICs), len(c.want))
				}
				for i, want := range c.want {
					got := d.NICs[i]
					sameNIC(t, got, want)
					if got.Healthy != want.Healthy {
						t.Errorf("%s: %s healthy %v, want %v", fsName, got.Name, got.Healthy, want.Healthy)
					}
					if paths := problemPaths(t, got.Problems); !slices.Equal(paths, c.problems[want.Name]) {
						t.Errorf("%s: %s problems %v, want %v", fsName, got.Name, got.Problems, c.problems[want.Name])
					}
					for j, s := range c.sentinels[want.Name] {
						if j < len(got.Problems) && !errors.Is(got.Problems[j], s) {
							t.Errorf("%s: %s problem %v is not %v", fsName, got.Name, got.Problems[j], s)
						}
					}
				}
				if paths := problemPaths(t, d.Problems); !slices.Equal(paths, c.globalProblems) {
					t.Errorf("%s: discovery problems %v, want %v", fsName, d.Problems, c.globalProblems)
				}
			}
		})
	}
}

// A file system that cannot read links still yields the same NICs: the PCI
// address and driver come from the uevent files then.
func TestDiscoverWithoutLinks(t *testing.T) {
	truth := writeTree(t, mocksysfs.Spec{NICs: 4, NUMANodes: 2, VFsPerNIC: 1, Seed: 2})
	want, err := Discover(os.DirFS(truth.SysRoot))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Discover(mocksysfs.NoLinkFS{FS: os.DirFS(truth.SysRoot)})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("without links:\n got %+v\nwant %+v", got, want)
	}
}

func TestDiscoverReadErrors(t *testing.T) {
	truth := writeTree(t, mocksysfs.Spec{NICs: 2, NUMANodes: 1, Faults: []mocksysfs.Fault{mocksysfs.LinkDown(1)}, Seed: 4})
	dirFS := os.DirFS(truth.SysRoot)
	hsn := func(i int) string { return "class/net/" + truth.NICs[i].NetDev }

	t.Run("class directory unreadable", func(t *testing.T) {
		_, err := Discover(errFS{dirFS, map[string]error{"class/cxi": fs.ErrPermission, "class/cxi_user": fs.ErrPermission}})
		if !errors.Is(err, fs.ErrPermission) {
			t.Errorf("Discover error %v, want a permission error", err)
		}
	})
	t.Run("one class directory unreadable", func(t *testing.T) {
		d, err := Discover(errFS{dirFS, map[string]error{"class/cxi": fs.ErrPermission}})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.NICs) != 2 || d.NICs[0].Path != "class/cxi_user/cxi0" || len(d.Problems) != 1 {
			t.Errorf("NICs %d (first at %q), problems %v; want 2 from cxi_user and one problem",
				len(d.NICs), d.NICs[0].Path, d.Problems)
		}
	})
	t.Run("attribute read fails", func(t *testing.T) {
		d, err := Discover(errFS{dirFS, map[string]error{"class/cxi/cxi0/device/properties/nid": syscall.EIO}})
		if err != nil {
			t.Fatal(err)
		}
		n := d.NICs[0]
		if len(n.Problems) != 1 || !errors.Is(n.Problems[0], syscall.EIO) || errors.Is(n.Problems[0], ErrMissing) || n.Healthy {
			t.Errorf("problems %v healthy %v; want one EIO error that is not ErrMissing", n.Problems, n.Healthy)
		}
		if len(d.NICs[1].Problems) != 0 {
			t.Errorf("sibling problems %v", d.NICs[1].Problems)
		}
	})
	t.Run("netdev speed refused while down", func(t *testing.T) {
		d, err := Discover(errFS{dirFS, map[string]error{hsn(1) + "/speed": syscall.EINVAL}})
		if err != nil {
			t.Fatal(err)
		}
		n := d.NICs[1]
		if len(n.Problems) != 0 || n.NetDev.SpeedMbps != -1 {
			t.Errorf("problems %v, speed %d; want none and -1", n.Problems, n.NetDev.SpeedMbps)
		}
	})
	t.Run("netdev speed refused while up", func(t *testing.T) {
		d, err := Discover(errFS{dirFS, map[string]error{hsn(0) + "/speed": syscall.EINVAL}})
		if err != nil {
			t.Fatal(err)
		}
		paths := problemPaths(t, d.NICs[0].Problems)
		if !slices.Equal(paths, []string{hsn(0) + "/speed"}) {
			t.Errorf("problems %v, want one for %s/speed", d.NICs[0].Problems, hsn(0))
		}
	})
	t.Run("class/net unreadable", func(t *testing.T) {
		d, err := Discover(errFS{dirFS, map[string]error{"class/net": fs.ErrPermission}})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Problems) != 1 || !errors.Is(d.Problems[0], fs.ErrPermission) || d.NICs[0].NetDev != nil {
			t.Errorf("problems %v, netdev %v; want one permission problem and no netdev", d.Problems, d.NICs[0].NetDev)
		}
	})
}

func TestDiscoverEdgeCases(t *testing.T) {
	if _, err := Discover(nil); err == nil {
		t.Error("Discover(nil) succeeded")
	}
	d, err := Discover(fstest.MapFS{"class/net/lo/operstate": {Data: []byte("unknown\n")}})
	if err != nil || len(d.NICs) != 0 || d.Err() != nil {
		t.Errorf("no driver loaded: %v, %v, %v; want no NICs and no error", d, err, d.Err())
	}
}

// Two netdevs on one PCI function are a problem; the first by name wins.
func TestDiscoverDuplicateNetDev(t *testing.T) {
	truth := writeTree(t, mocksysfs.Spec{NICs: 2, NUMANodes: 1, Seed: 8})
	target, err := os.Readlink(filepath.Join(truth.SysRoot, "class/net", truth.NICs[0].NetDev))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(truth.SysRoot, "class/net/zz0")); err != nil {
		t.Fatal(err)
	}
	d, err := Discover(os.DirFS(truth.SysRoot))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Problems) != 1 || d.NICs[0].NetDev.Name != truth.NICs[0].NetDev {
		t.Errorf("problems %v, netdev %s; want one problem and %s", d.Problems, d.NICs[0].NetDev.Name, truth.NICs[0].NetDev)
	}
}

func TestReadLinkState(t *testing.T) {
	truth := writeTree(t, mocksysfs.Spec{NICs: 2, NUMANodes: 1, Seed: 6})
	fsys := os.DirFS(truth.SysRoot)
	d, err := Discover(fsys)
	if err != nil {
		t.Fatal(err)
	}
	nic := d.NICs[1]
	read := func() LinkState {
		t.Helper()
		st, err := ReadLinkState(fsys, nic)
		if err != nil {
			t.Fatalf("ReadLinkState: %v", err)
		}
		return st
	}
	want := LinkState{Link: true, SpeedMbps: 200000, PCTEq: truth.NICs[1].Properties.PCTEq, OperState: "up"}
	if st := read(); st != want || !st.Up() || !st.RetryHandlerRunning() {
		t.Errorf("initial state %+v, want %+v, up and with a retry handler", st, want)
	}
	if err := mocksysfs.SetLink(truth.Dir, "cxi1", false); err != nil {
		t.Fatal(err)
	}
	if st := read(); st.Link || st.OperState != "down" || st.Up() {
		t.Errorf("after link down: %+v", st)
	}
	if err := mocksysfs.SetRetryHandler(truth.Dir, "cxi1", false); err != nil {
		t.Fatal(err)
	}
	if st := read(); st.RetryHandlerRunning() {
		t.Errorf("after stopping the retry handler: %+v", st)
	}
	if err := mocksysfs.SetLink(truth.Dir, "cxi1", true); err != nil {
		t.Fatal(err)
	}
	if err := mocksysfs.SetRetryHandler(truth.Dir, "cxi1", true); err != nil {
		t.Fatal(err)
	}
	if st := read(); st != want {
		t.Errorf("after link up: %+v, want %+v", st, want)
	}

	// A NIC without a netdev reads no operstate.
	noNetdev := nic
	noNetdev.NetDev = nil
	if st, err := ReadLinkState(fsys, noNetdev); err != nil || st.OperState != "" || !st.Up() {
		t.Errorf("without netdev: %+v, %v", st, err)
	}

	// The NIC disappears.
	if err := os.RemoveAll(filepath.Join(truth.SysRoot, nic.Path)); err != nil {
		t.Fatal(err)
	}
	_, err = ReadLinkState(fsys, nic)
	var ae *AttrError
	if !errors.Is(err, ErrMissing) || !errors.As(err, &ae) || ae.Path != "class/cxi/cxi1/device/properties/link" {
		t.Errorf("after removal: %v; want ErrMissing naming class/cxi/cxi1/device/properties/link", err)
	}
	if _, err := ReadLinkState(nil, nic); err == nil {
		t.Error("ReadLinkState(nil) succeeded")
	}
}

func BenchmarkDiscover16(b *testing.B) {
	truth := writeTree(b, mocksysfs.Spec{NICs: 16, NUMANodes: 2, GPUs: 16, Seed: 1})
	fsys := os.DirFS(truth.SysRoot)
	b.ReportAllocs()
	for b.Loop() {
		d, err := Discover(fsys)
		if err != nil || len(d.NICs) != 16 {
			b.Fatalf("Discover: %v", err)
		}
	}
}

func BenchmarkReadLinkState(b *testing.B) {
	truth := writeTree(b, mocksysfs.Spec{NICs: 1, NUMANodes: 1})
	fsys := os.DirFS(truth.SysRoot)
	d, err := Discover(fsys)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadLinkState(fsys, d.NICs[0]); err != nil {
			b.Fatal(err)
		}
	}
}

// TestItem11DiscoverCassini1VFsByBAR0Size (issue 15, item 11) discovers a Cassini-1 node with VFs.
// Cassini-1 VFs have the PF's PCI IDs, so, as the driver's probe does,
// discovery tells them apart by BAR 0: below 2 GiB (MMIO_BAR_LEN_PF) is a
// VF. The cases rewrite cxi2's resource file (a VF of cxi0) or cxi0's.
func TestItem11DiscoverCassini1VFsByBAR0Size(t *testing.T) {
	truth := writeTree(t, mocksysfs.Spec{NICs: 2, NUMANodes: 1, Generation: mocksysfs.Cassini1, VFsPerNIC: 2, Seed: 11})
	base := loadMapFS(t, truth.SysRoot)
	resource := func(i int) string { return truth.NICs[i].PCIPath + "/resource" }
	bar0 := func(size uint64) string {
		return fmt.Sprintf("0x%016x 0x%016x 0x%016x\n", 0x1000000000, 0x1000000000+size-1, 0x14220c)
	}
	cases := []struct {
		name    string
		edit    map[string]string // path to new content; "" removes the file
		vf      map[string]bool   // the NICs whose VF flag differs from the truth
		problem string            // the one expected problem, relative to the sysfs root
		err     error
	}{
		{name: "as written"},
		{name: "VF's BAR 0 of exactly 2 GiB is a PF", edit: map[string]string{resource(2): bar0(2 << 30)},
			vf: map[string]bool{"cxi2": false}},
		{name: "PF's BAR 0 of 2 GiB less a page is a VF", edit: map[string]string{resource(0): bar0(2<<30 - 4096)},
			vf: map[string]bool{"cxi0": true}},
		{name: "BAR 0 not assigned is a VF", edit: map[string]string{resource(0): strings.Repeat("0x0000000000000000 ", 2) + "0x0000000000000000\n"},
			vf: map[string]bool{"cxi0": true}},
		{name: "no resource file", edit: map[string]string{resource(2): ""},
			vf: map[string]bool{"cxi2": false}, problem: "class/cxi/cxi2/device/resource", err: ErrMissing},
		{name: "garbage resource file", edit: map[string]string{resource(2): "0x10 0x1\n"},
			vf: map[string]bool{"cxi2": false}, problem: "class/cxi/cxi2/device/resource", err: ErrInvalidValue},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys := maps.Clone(base)
			for p, content := range c.edit {
				if content == "" {
					delete(fsys, p)
					continue
				}
				fsys[p] = &fstest.MapFile{Data: []byte(content), Mode: 0o444}
			}
			d, err := Discover(fsys)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.NICs) != len(truth.NICs) {
				t.Fatalf("found %d NICs, wrote %d", len(d.NICs), len(truth.NICs))
			}
			var problems []string
			for i, n := range d.NICs {
				want, ok := c.vf[n.Name]
				if !ok {
					want = truth.NICs[i].VF
				}
				if n.VF != want || n.Generation != Cassini1 {
					t.Errorf("%s: VF %v, generation %v; want VF %v, Cassini-1", n.Name, n.VF, n.Generation, want)
				}
				problems = append(problems, problemPaths(t, n.Problems)...)
				if c.err != nil && len(n.Problems) > 0 && !errors.Is(n.Problems[0], c.err) {
					t.Errorf("%s: problem %v does not wrap %v", n.Name, n.Problems[0], c.err)
				}
			}
			if want := []string{c.problem}; (c.problem == "" && len(problems) > 0) ||
				(c.problem != "" && !slices.Equal(problems, want)) {
				t.Errorf("problems %q, want %q", problems, c.problem)
			}
		})
	}
}
