package sim

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// rangeDesc is a service for a VNI range: restricted_vnis=0, so it gets
// its VNIs from SVC_SET_VNI_RANGE.
func rangeDesc() uapi.SvcDesc {
	d := podDesc()
	d.RestrictedVNIs = false
	return d
}

// allocRange allocates a range service and sets its range; it returns the
// ID and SET_VNI_RANGE's error.
func allocRange(t *testing.T, dev *uapi.Device, vniMin, vniMax uint32) (uint32, error) {
	t.Helper()
	id := mustAlloc(t, dev, rangeDesc())
	return id, dev.SetVNIRange(id, vniMin, vniMax)
}

// TestVNIRangeOverlapIsEEXIST follows vni_overlap_test, which the driver
// runs for every new TX and RX profile against all existing ones
// (cxi_rxtx_profile.c): two exact VNIs may be shared, but a range may
// overlap nothing, and nothing may fall in a range. The default service's
// profiles (VNIs 1 and 10) count although it is disabled.
func TestVNIRangeOverlapIsEEXIST(t *testing.T) {
	exact := func(vnis ...uint16) func(*testing.T, *uapi.Device) error {
		return func(t *testing.T, dev *uapi.Device) error {
			_, _, err := dev.AllocService(podDesc(vnis...))
			return err
		}
	}
	ranged := func(vniMin, vniMax uint32) func(*testing.T, *uapi.Device) error {
		return func(t *testing.T, dev *uapi.Device) error {
			_, err := allocRange(t, dev, vniMin, vniMax)
			return err
		}
	}
	type step = func(*testing.T, *uapi.Device) error
	// last acts on the service the step before made.
	last := func(act func(dev *uapi.Device, id uint32) error) step {
		return func(t *testing.T, dev *uapi.Device) error {
			descs, err := dev.ListServices()
			if err != nil {
				return err
			}
			return act(dev, descs[len(descs)-1].SvcID)
		}
	}
	tests := []struct {
		name  string
		setup []step
		do    step
		want  syscall.Errno
	}{
		{"two services share an exact VNI", []step{exact(1024)}, exact(1024), 0},
		{"an exact VNI inside another's range", []step{ranged(64, 127)}, exact(1024, 100), syscall.EEXIST},
		{"a range over another's exact VNI", []step{exact(100)}, ranged(64, 127), syscall.EEXIST},
		{"overlapping ranges", []step{ranged(64, 127)}, ranged(96, 127), syscall.EEXIST},
		{"a range inside another", []step{ranged(96, 127)}, ranged(64, 127), syscall.EEXIST},
		{"disjoint ranges", []step{ranged(64, 127)}, ranged(128, 255), 0},
		{"next to the default service's VNIs", nil, ranged(16, 31), 0},
		{"over the default service's VNI 10, disabled as it is", nil, ranged(8, 15), syscall.EEXIST},
		{"a one-VNI range is exact and may share", []step{exact(200)}, ranged(200, 200), 0},
		{"a one-VNI range inside a range", []step{ranged(64, 127)}, ranged(100, 100), syscall.EEXIST},
		{"over a disabled service's VNI", []step{exact(100), last(func(dev *uapi.Device, id uint32) error {
			return dev.EnableService(id, false)
		})}, ranged(64, 127), syscall.EEXIST},
		{"a destroyed range frees its VNIs", []step{ranged(64, 127), last(func(dev *uapi.Device, id uint32) error {
			return dev.DestroyService(id)
		})}, exact(100), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, dev := open(t, t.TempDir(), Options{NoSync: true})
			for i, step := range tc.setup {
				wantErrno(t, fmt.Sprintf("setup step %d", i+1), step(t, dev), 0)
			}
			wantErrno(t, tc.name, tc.do(t, dev), tc.want)
		})
	}
}

// TestVNIRangeRules follows cxi_svc_set_vni_range and _get_vni_range.
func TestVNIRangeRules(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{NoSync: true})
	exactID := mustAlloc(t, dev, podDesc(1024))
	id := mustAlloc(t, dev, rangeDesc())
	if svcs, _ := s.Services(); svcs[len(svcs)-1].Desc.Enable {
		t.Fatal("a restricted_vnis=0 service is enabled before it has a range")
	}
	for _, c := range []struct {
		name           string
		id, vMin, vMax uint32
	}{
		{"a service with restricted VNIs", exactID, 64, 127},
		{"the default service", uapi.DefaultSvcID, 64, 127},
		{"an unknown service", 99, 64, 127},
		{"VNI 0", id, 0, 63},
		{"a VNI past 16 bits", id, 0x10000, 0x1ffff},
		{"max below min", id, 127, 64},
		{"not a power of two", id, 64, 159},
		{"not aligned", id, 32, 95},
	} {
		wantErrno(t, c.name, dev.SetVNIRange(c.id, c.vMin, c.vMax), syscall.EINVAL)
	}
	_, _, err := dev.GetVNIRange(id)
	wantErrno(t, "get before a range is set", err, syscall.EINVAL)

	wantErrno(t, "set", dev.SetVNIRange(id, 4096, 8191), 0)
	vMin, vMax, err := dev.GetVNIRange(id)
	if err != nil || vMin != 4096 || vMax != 8191 {
		t.Fatalf("GetVNIRange = %d, %d, %v; want 4096, 8191", vMin, vMax, err)
	}
	wantErrno(t, "enable with a range", dev.EnableService(id, true), 0)
	svcs, _ := s.Services()
	if got := svcs[len(svcs)-1]; !got.Desc.Enable || got.RMUEntries != 1 || got.Desc.NumVldVNIs != 1 ||
		got.VNIMin != 4096 || got.VNIMax != 8191 {
		t.Fatalf("range service = %+v", got)
	}
	_, _, err = dev.GetVNIRange(exactID)
	wantErrno(t, "get of a service with restricted VNIs", err, syscall.EINVAL)

	// A refused range still sets num_vld_vnis: the service has a VNI
	// slot without a profile, so it cannot be enabled.
	other := mustAlloc(t, dev, rangeDesc())
	wantErrno(t, "overlapping range", dev.SetVNIRange(other, 4096, 4351), syscall.EEXIST)
	_, _, err = dev.GetVNIRange(other)
	wantErrno(t, "get after a refused range", err, syscall.ENOENT)
	wantErrno(t, "enable after a refused range", dev.EnableService(other, true), syscall.EINVAL)
	wantErrno(t, "a later range that fits", dev.SetVNIRange(other, 8192, 8447), 0)
	wantErrno(t, "enable", dev.EnableService(other, true), 0)
}

func TestVNIRangeAdminOnly(t *testing.T) {
	dir := t.TempDir()
	_, pf := open(t, dir, Options{NoSync: true})
	id := mustAlloc(t, pf, rangeDesc())
	for _, opts := range []Options{{NotAdmin: true}, {VF: true}} {
		_, dev := open(t, dir, opts)
		wantErrno(t, "set_vni_range", dev.SetVNIRange(id, 64, 127), syscall.EPERM)
		_, _, err := dev.GetVNIRange(id)
		wantErrno(t, "get_vni_range is not admin-only", err, syscall.EINVAL)
	}
}
