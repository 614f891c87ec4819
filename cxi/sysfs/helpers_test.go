package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// writeTree writes a mock node under a fresh temporary directory.
func writeTree(tb testing.TB, spec mocksysfs.Spec) *mocksysfs.Truth {
	tb.Helper()
	truth, err := mocksysfs.Write(filepath.Join(tb.TempDir(), "node"), spec)
	if err != nil {
		tb.Fatalf("mocksysfs.Write: %v", err)
	}
	return truth
}

// expectedNIC is what discovery should report for a NIC the generator wrote,
// Healthy and Problems aside.
func expectedNIC(tn mocksysfs.NIC) NIC {
	gen, _, _ := Identify(tn.VendorID, tn.DeviceID)
	p := tn.Properties
	n := NIC{
		Name: tn.Name, Index: tn.Index, Path: tn.ClassPath, PCIAddress: tn.PCIAddress,
		VendorID: tn.VendorID, DeviceID: tn.DeviceID, Generation: gen, VF: tn.VF,
		NUMANode: tn.NUMANode, Driver: tn.Driver,
		Properties: Properties{
			NID: p.NID, PIDBits: p.PIDBits, PIDCount: p.PIDCount, PIDGranule: p.PIDGranule,
			Link: p.Link, SpeedMbps: p.SpeedMbps, PCTEq: p.PCTEq, CassiniVersion: p.CassiniVersion,
			Max: ResourceMaxima{PTEs: p.PTEs, TXQs: p.TXQs, TGQs: p.TGQs, EQs: p.EQs, CTs: p.CTs,
				ACs: p.ACs, TLEs: p.TLEs, LEs: p.LEs},
			RGIDsAvail: p.RGIDsAvail,
		},
		FirmwareVersion: tn.FirmwareVersion, FRUDescription: tn.FRUDescription,
	}
	if tn.NetDev != "" {
		mac, err := parseMAC(tn.MAC)
		if err != nil {
			panic(fmt.Sprintf("generator wrote a bad MAC %q: %v", tn.MAC, err))
		}
		n.NetDev = &NetDev{Name: tn.NetDev, OperState: tn.OperState, SpeedMbps: tn.NetSpeedMbps,
			MAC: mac, AddrAssignType: tn.AddrAssignType}
	}
	return n
}

// sameNIC compares got with want, ignoring Healthy and Problems.
func sameNIC(t *testing.T, got, want NIC) {
	t.Helper()
	got.Healthy, got.Problems = false, nil
	want.Healthy, want.Problems = false, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s differs from the truth:\n got %s\nwant %s", want.Name, describe(got), describe(want))
	}
}

func describe(n NIC) string {
	s := fmt.Sprintf("%+v", n)
	if n.NetDev != nil {
		s += fmt.Sprintf(" netdev %+v", *n.NetDev)
	}
	return s
}

// problemPaths returns the Path of every *AttrError in errs.
func problemPaths(t *testing.T, errs []error) []string {
	t.Helper()
	var paths []string
	for _, err := range errs {
		var ae *AttrError
		if !errors.As(err, &ae) {
			t.Errorf("problem %v is not an *AttrError", err)
			continue
		}
		paths = append(paths, ae.Path)
	}
	return paths
}

// loadMapFS copies the tree at dir into a MapFS (mocksysfs.LoadMapFS).
func loadMapFS(tb testing.TB, dir string) fstest.MapFS {
	tb.Helper()
	m, err := mocksysfs.LoadMapFS(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// errFS fails Open of the listed paths with the given error and otherwise
// passes through, links included.
type errFS struct {
	inner fs.FS
	fail  map[string]error
}

func (e errFS) Open(name string) (fs.File, error) {
	if err, ok := e.fail[name]; ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return e.inner.Open(name)
}

func (e errFS) ReadLink(name string) (string, error)   { return fs.ReadLink(e.inner, name) }
func (e errFS) Lstat(name string) (fs.FileInfo, error) { return fs.Lstat(e.inner, name) }
