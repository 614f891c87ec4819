package sim

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// open opens simulated cxi0 in dir as the NIC of a node without cxi_eth,
// with no Ethernet service, so that the IDs, pools and reservations the
// rule tests check are the driver's own; openBooted opens it as a booted
// node has it.
func open(t *testing.T, dir string, opts Options) (*Device, *uapi.Device) {
	t.Helper()
	opts.NoEthernetService = true
	return openBooted(t, dir, opts)
}

func openBooted(t *testing.T, dir string, opts Options) (*Device, *uapi.Device) {
	t.Helper()
	s, err := Open(dir, "cxi0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, uapi.NewDevice(s)
}

// podDesc is what the agent asks for: uid member, restricted VNIs, no TLE
// or LE reservation.
func podDesc(vnis ...uint16) uapi.SvcDesc {
	d := uapi.SvcDesc{RestrictedMembers: true, RestrictedVNIs: true, RestrictedTCs: true, ResourceLimits: true}
	d.Members[0] = uapi.SvcMember{Type: uapi.MemberUID, ID: 1000}
	d.NumVldVNIs = uint8(len(vnis))
	copy(d.VNIs[:], vnis)
	d.TCs[uapi.TCBestEffort] = true
	for t, m := range DefaultMax() {
		d.Limits[t] = uapi.Limits{Max: m}
	}
	d.Limits[uapi.RsrcTLE] = uapi.Limits{}
	return d
}

func mustAlloc(t *testing.T, dev *uapi.Device, d uapi.SvcDesc) uint32 {
	t.Helper()
	id, fail, err := dev.AllocService(d)
	if err != nil {
		t.Fatalf("AllocService: %v (%s)", err, fail)
	}
	return id
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if want == 0 {
		if err != nil {
			t.Fatalf("%s: %v, want success", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

func TestDefaultService(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{})
	d, err := dev.GetService(uapi.DefaultSvcID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Enable || !d.RestrictedVNIs || d.RestrictedMembers || d.NumVldVNIs != 2 || d.VNIs[0] != 1 || d.VNIs[1] != 10 {
		t.Fatalf("default service = %+v", d)
	}
	if d.Limits[uapi.RsrcTLE] != (uapi.Limits{Max: 512, Res: 512}) || !d.TCs[uapi.TCBestEffort] || d.TCs[uapi.TCEth] {
		t.Fatalf("default service limits/TCs = %+v", d)
	}
	svcs, err := s.Services()
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 1 || svcs[0].Name != "default" || svcs[0].TLEPool != 0 || !svcs[0].Open {
		t.Fatalf("services = %+v", svcs)
	}
	wantErrno(t, "destroy default", dev.DestroyService(uapi.DefaultSvcID), syscall.EINVAL)
	// It can be enabled (cxi_service enable -s 1): two VNIs, two RMU entries.
	wantErrno(t, "enable default", dev.EnableService(uapi.DefaultSvcID, true), 0)
	svcs, _ = s.Services()
	if !svcs[0].Desc.Enable || svcs[0].RMUEntries != 2 {
		t.Fatalf("enabled default = %+v", svcs[0])
	}

	s2, _ := open(t, t.TempDir(), Options{DefaultServiceEnabled: true})
	svcs, _ = s2.Services()
	if !svcs[0].Desc.Enable {
		t.Fatal("DefaultServiceEnabled left the default service disabled")
	}
}

// TestServicesAtStart: the driver creates the default service at load
// (cass_svc_init), and cxi_eth the Ethernet system service when the hsn
// link of the PF comes up (cxi_eth_ops.c hw_setup), which then holds an
// LNI on it for as long as the link is up. Options.NoEthernetService
// leaves the latter out.
func TestServicesAtStart(t *testing.T) {
	ethLimits := [uapi.NumRsrcTypes]uapi.Limits{
		uapi.RsrcPTE: {Max: 17, Res: 8}, uapi.RsrcTXQ: {Max: 32, Res: 1}, uapi.RsrcTGQ: {Max: 18, Res: 1},
		uapi.RsrcEQ: {Max: 49, Res: 1}, uapi.RsrcLE: {Max: 16384, Res: 660}, uapi.RsrcAC: {Max: 1, Res: 1},
	}
	tests := []struct {
		name  string
		opts  Options
		names []string
	}{
		{"a node with its hsn link up", Options{}, []string{"default", "ethernet-svc"}},
		{"with the default service enabled", Options{DefaultServiceEnabled: true},
			[]string{"default", "ethernet-svc"}},
		{"no cxi_eth, or the link down", Options{NoEthernetService: true}, []string{"default"}},
		{"the Ethernet service does not fit the maxima",
			Options{Max: [uapi.NumRsrcTypes]uint16{uapi.RsrcTXQ: 16}}, []string{"default"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, dev := openBooted(t, t.TempDir(), tc.opts)
			svcs, err := s.Services()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, svc := range svcs {
				names = append(names, svc.Name)
			}
			if fmt.Sprint(names) != fmt.Sprint(tc.names) {
				t.Fatalf("services %v, want %v", names, tc.names)
			}
			if len(svcs) < 2 {
				return
			}
			eth := svcs[1]
			d := eth.Desc
			if d.SvcID != 2 || !d.IsSystemSvc || !d.Enable || !d.RestrictedVNIs || d.NumVldVNIs != 0 ||
				!d.RestrictedMembers || d.Limits != ethLimits || eth.LNIs != 1 || eth.LEPool != 1 ||
				fmt.Sprint(eth.UIDs) != "[0]" || eth.Open || eth.RMUEntries != 0 {
				t.Fatalf("Ethernet service = %+v", eth)
			}
			wantErrno(t, "destroy the Ethernet service", dev.DestroyService(2), syscall.EBUSY)
			wantErrno(t, "disable the Ethernet service", dev.EnableService(2, false), syscall.EBUSY)
			if id := mustAlloc(t, dev, podDesc(1024)); id != 3 {
				t.Fatalf("first user service %d, want 3", id)
			}
		})
	}
}

// userPtr stores a pointer to buf at off of an aligned command.
func putPtr(cmd []byte, off int, buf []byte) {
	*(*unsafe.Pointer)(unsafe.Pointer(&cmd[off])) = unsafe.Pointer(unsafe.SliceData(buf))
}

func marshal(t *testing.T, v interface{ MarshalBinary() ([]byte, error) }) []byte {
	t.Helper()
	b, err := v.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := alignedBytes(len(b))
	copy(cmd, b)
	return cmd
}

func TestTransportRules(t *testing.T) {
	s, _ := open(t, t.TempDir(), Options{})
	alloc := marshal(t, uapi.SvcAllocCmd{Desc: podDesc(1024)})
	withOp := func(op uint32, n int) []byte {
		b := make([]byte, n)
		uapiPutOp(b, op)
		return b
	}
	tests := []struct {
		name string
		cmd  []byte
		want syscall.Errno
	}{
		{"empty", nil, syscall.EINVAL},
		{"shorter than an op", []byte{28, 0, 0}, syscall.EINVAL},
		{"op 0", withOp(0, 24), syscall.EINVAL},
		{"op CXI_OP_MAX", withOp(110, 24), syscall.EINVAL},
		{"obsoleted op", withOp(35, 24), syscall.EOPNOTSUPP},
		{"LNI_ALLOC is not simulated", withOp(1, 24), syscall.EOPNOTSUPP},
		{"alloc one byte short", alloc[:uapi.SvcAllocCmdSize-1], syscall.EINVAL},
		{"alloc one byte long", append(append([]byte{}, alloc...), 0), syscall.EINVAL},
		{"destroy padded to 16", withOp(29, 16), syscall.EINVAL},
		{"alloc with nil response pointer", alloc, syscall.EFAULT},
		{"get with nil response pointer", marshal(t, uapi.SvcGetCmd{SvcID: 1}), syscall.EFAULT},
		{"get of unknown id fails before the copy", marshal(t, uapi.SvcGetCmd{SvcID: 99}), syscall.EINVAL},
		{"list with nil response pointer", marshal(t, uapi.SvcListGetCmd{}), syscall.EFAULT},
		{"get_netns of unknown id", marshal(t, uapi.SvcGetNetnsCmd{SvcID: 99}), syscall.EINVAL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := s.Write(tc.cmd)
			if n != 0 || !errors.Is(err, tc.want) {
				t.Fatalf("Write = %d, %v; want 0, %v", n, err, tc.want)
			}
		})
	}
	// The kernel copies the response after creating the service, so the
	// EFAULT above leaked one, as it would on a real NIC.
	svcs, _ := s.Services()
	if len(svcs) != 2 {
		t.Fatalf("after alloc with a nil response pointer: %d services, want 2", len(svcs))
	}
}

func uapiPutOp(b []byte, op uint32) {
	b[0], b[1], b[2], b[3] = byte(op), byte(op>>8), byte(op>>16), byte(op>>24)
}

func TestAdminRules(t *testing.T) {
	dir := t.TempDir()
	pf, pfDev := open(t, dir, Options{})
	id := mustAlloc(t, pfDev, podDesc(1024))
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"not admin", Options{NotAdmin: true}},
		{"VF", Options{VF: true}},
		{"VF of another PF", Options{VF: true, PF: "cxi0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "cxi0"
			if tc.opts.PF != "" {
				name = "cxi1"
			}
			s, err := Open(dir, name, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			dev := uapi.NewDevice(s)
			_, _, err = dev.AllocService(podDesc(1025))
			wantErrno(t, "alloc", err, syscall.EPERM)
			wantErrno(t, "destroy", dev.DestroyService(id), syscall.EPERM)
			wantErrno(t, "enable", dev.EnableService(id, false), syscall.EPERM)
			wantErrno(t, "set netns", dev.SetNetns(id, 4026532000), syscall.EPERM)
			// The read-only commands work, and a VF sees its PF's services.
			descs, err := dev.ListServices()
			if err != nil || len(descs) != 2 || descs[1].SvcID != id {
				t.Fatalf("ListServices = %+v, %v", descs, err)
			}
			if _, err := dev.GetService(id); err != nil {
				t.Fatal(err)
			}
			_, err = dev.GetNetns(id)
			wantErrno(t, "get netns of a uid service", err, syscall.EINVAL)
		})
	}
	svcs, _ := pf.Services()
	if len(svcs) != 2 {
		t.Fatalf("refused commands changed the PF: %+v", svcs)
	}
}

func TestAllocValidation(t *testing.T) {
	tests := []struct {
		name string
		edit func(*uapi.SvcDesc)
		want syscall.Errno
	}{
		{"accepted", func(*uapi.SvcDesc) {}, 0},
		{"five VNIs", func(d *uapi.SvcDesc) { d.NumVldVNIs = 5 }, syscall.EINVAL},
		{"VNI 0", func(d *uapi.SvcDesc) { d.NumVldVNIs, d.VNIs[1] = 2, 0 }, syscall.EINVAL},
		{"VNIs past num_vld_vnis are not checked", func(d *uapi.SvcDesc) { d.NumVldVNIs = 1 }, 0},
		{"no VNI check without restricted_vnis", func(d *uapi.SvcDesc) { d.RestrictedVNIs, d.NumVldVNIs = false, 9 }, 0},
		{"member type 4", func(d *uapi.SvcDesc) { d.Members[1].Type = uapi.MemberMax }, syscall.EINVAL},
		{"member type ignored when open", func(d *uapi.SvcDesc) { d.RestrictedMembers, d.Members[1].Type = false, 9 }, 0},
		{"res above max", func(d *uapi.SvcDesc) { d.Limits[uapi.RsrcEQ] = uapi.Limits{Max: 1, Res: 2} }, syscall.EINVAL},
		{"max above the device's", func(d *uapi.SvcDesc) { d.Limits[uapi.RsrcAC].Max = 1023 }, syscall.EINVAL},
		{"limits unchecked without resource_limits", func(d *uapi.SvcDesc) {
			d.ResourceLimits, d.Limits[uapi.RsrcAC].Max = false, 60000
		}, 0},
		{"the same uid twice", func(d *uapi.SvcDesc) { d.Members[1] = d.Members[0] }, syscall.EEXIST},
		{"uid and gid with one value", func(d *uapi.SvcDesc) {
			d.Members[1] = uapi.SvcMember{Type: uapi.MemberGID, ID: d.Members[0].ID}
		}, 0},
		{"uid -1", func(d *uapi.SvcDesc) { d.Members[0].ID = 0xffffffff }, syscall.EBADR},
		{"gid -1", func(d *uapi.SvcDesc) { d.Members[1] = uapi.SvcMember{Type: uapi.MemberGID, ID: 0xffffffff} }, syscall.EBADR},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, dev := open(t, t.TempDir(), Options{NoSync: true})
			d := podDesc(1024, 2048)
			tc.edit(&d)
			id, fail, err := dev.AllocService(d)
			wantErrno(t, "alloc", err, tc.want)
			svcs, _ := s.Services()
			if tc.want != 0 {
				if !fail.IsZero() || len(svcs) != 1 {
					t.Fatalf("failed alloc: fail info %+v, %d services", fail, len(svcs))
				}
				return
			}
			if id != 2 || len(svcs) != 2 {
				t.Fatalf("id %d, %d services", id, len(svcs))
			}
		})
	}
}

func TestEnableStateAfterAlloc(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{})
	restricted := mustAlloc(t, dev, podDesc(1024))
	open := podDesc()
	open.RestrictedVNIs = false
	rangeLater := mustAlloc(t, dev, open)
	svcs, _ := s.Services()
	if !svcs[1].Desc.Enable || svcs[1].Desc.SvcID != restricted || svcs[1].RMUEntries != 1 {
		t.Fatalf("restricted_vnis=1 service: %+v", svcs[1])
	}
	if svcs[2].Desc.Enable || svcs[2].Desc.SvcID != rangeLater || svcs[2].RMUEntries != 0 {
		t.Fatalf("restricted_vnis=0 service: %+v", svcs[2])
	}
	// The enable bit of the request is ignored.
	off := podDesc(1025)
	off.Enable = false
	id := mustAlloc(t, dev, off)
	d, _ := dev.GetService(id)
	if !d.Enable {
		t.Fatal("alloc honoured enable=0")
	}
}

func TestTLEPools(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{NoSync: true})
	withTLEs := podDesc(1024)
	withTLEs.Limits[uapi.RsrcTLE] = uapi.Limits{Max: 100, Res: 0}
	// Pool 0 belongs to the default service: three more fit.
	var ids []uint32
	for range 3 {
		ids = append(ids, mustAlloc(t, dev, withTLEs))
	}
	d, _ := dev.GetService(ids[0])
	if d.Limits[uapi.RsrcTLE] != (uapi.Limits{Max: 8, Res: 8}) {
		t.Fatalf("TLE limits {100,0} stored as %+v, want forced to {8,8}", d.Limits[uapi.RsrcTLE])
	}
	_, fail, err := dev.AllocService(withTLEs)
	wantErrno(t, "fourth TLE pool", err, syscall.ENOSPC)
	if !fail.NoTLEPools || fail.NoLEPools || fail.RsrcAvail[uapi.RsrcPTE] != 2048 {
		t.Fatalf("fail info = %+v", fail)
	}
	// resource_limits=0 means the device maxima, TLEs included: no pool left.
	unlimited := podDesc(1025)
	unlimited.ResourceLimits = false
	unlimited.Limits = uapi.RsrcLimits{}
	_, fail, err = dev.AllocService(unlimited)
	wantErrno(t, "resource_limits=0", err, syscall.ENOSPC)
	if !fail.NoTLEPools {
		t.Fatalf("fail info = %+v", fail)
	}
	// Services reserving no TLEs still fit.
	for range 20 {
		mustAlloc(t, dev, podDesc(1026))
	}
	// Destroying one frees its pool.
	wantErrno(t, "destroy", dev.DestroyService(ids[1]), 0)
	id := mustAlloc(t, dev, unlimited)
	svcs, _ := s.Services()
	for _, svc := range svcs {
		if svc.Desc.SvcID == id && (svc.TLEPool != 2 || svc.Desc.Limits[uapi.RsrcPTE].Max != 2048) {
			t.Fatalf("service %d: TLE pool %d, limits %+v", id, svc.TLEPool, svc.Desc.Limits)
		}
	}
	// Too many TLEs for what is left: ENOSPC without the pool flag.
	wantErrno(t, "destroy", dev.DestroyService(ids[2]), 0)
	big := podDesc(1027)
	big.Limits[uapi.RsrcTLE] = uapi.Limits{Max: 2000, Res: 2000}
	_, fail, err = dev.AllocService(big)
	wantErrno(t, "2000 TLEs", err, syscall.ENOSPC)
	if fail.NoTLEPools {
		t.Fatalf("fail info = %+v", fail)
	}
}

func TestLEPools(t *testing.T) {
	_, dev := open(t, t.TempDir(), Options{NoSync: true})
	withLEs := podDesc(1024)
	withLEs.Limits[uapi.RsrcLE] = uapi.Limits{Max: 1000, Res: 100}
	for range 15 { // pools 1-15; pool 0 is shared
		mustAlloc(t, dev, withLEs)
	}
	_, fail, err := dev.AllocService(withLEs)
	wantErrno(t, "16th LE pool", err, syscall.ENOSPC)
	if !fail.NoLEPools || fail.NoTLEPools || fail.RsrcAvail[uapi.RsrcLE] != 16384-1500 {
		t.Fatalf("fail info = %+v", fail)
	}
	// Reserving no LEs shares pool 0.
	mustAlloc(t, dev, podDesc(1025))
}

func TestReservationsRunOut(t *testing.T) {
	_, dev := open(t, t.TempDir(), Options{})
	hog := podDesc(1024)
	hog.Limits[uapi.RsrcTXQ] = uapi.Limits{Max: 1024, Res: 1000}
	mustAlloc(t, dev, hog)
	more := podDesc(1025)
	more.Limits[uapi.RsrcTXQ] = uapi.Limits{Max: 100, Res: 25}
	_, fail, err := dev.AllocService(more)
	wantErrno(t, "TXQs", err, syscall.ENOSPC)
	if fail.RsrcAvail[uapi.RsrcTXQ] != 24 || fail.RsrcAvail[uapi.RsrcPTE] != 2048 || fail.NoLEPools || fail.NoTLEPools {
		t.Fatalf("fail info = %+v", fail)
	}
	more.Limits[uapi.RsrcTXQ].Res = 24
	mustAlloc(t, dev, more)
}

func TestRMUEntriesRunOut(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{NoSync: true})
	for i := range 64 { // 64 services × 4 VNIs = the 256 entries
		v := uint16(1024 + 4*i)
		mustAlloc(t, dev, podDesc(v, v+1, v+2, v+3))
	}
	_, fail, err := dev.AllocService(podDesc(5000))
	wantErrno(t, "257th RX profile", err, syscall.ENOSPC)
	if fail.NoLEPools || fail.NoTLEPools {
		t.Fatalf("fail info = %+v", fail)
	}
	svcs, _ := s.Services()
	if len(svcs) != 65 {
		t.Fatalf("%d services after the failed alloc, want 65", len(svcs))
	}
	// A disabled service holds no entry; enabling needs one.
	wantErrno(t, "disable", dev.EnableService(2, false), 0)
	mustAlloc(t, dev, podDesc(5000))
	wantErrno(t, "re-enable", dev.EnableService(2, true), syscall.ENOSPC)
	d, _ := dev.GetService(2)
	if d.Enable {
		t.Fatal("service enabled after ENOSPC")
	}
}

func TestEnableRules(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{})
	id := mustAlloc(t, dev, podDesc(1024))
	wantErrno(t, "unknown", dev.EnableService(99, true), syscall.EINVAL)
	if err := s.SetInUse(id, 1); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "disable in use", dev.EnableService(id, false), syscall.EBUSY)
	wantErrno(t, "enable in use", dev.EnableService(id, true), syscall.EBUSY)
	if err := s.SetInUse(id, 0); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "disable", dev.EnableService(id, false), 0)
	wantErrno(t, "disable twice", dev.EnableService(id, false), 0)

	// A VNI-range service without its range has no profiles to enable.
	noRange := podDesc(7)
	noRange.RestrictedVNIs = false
	nr := mustAlloc(t, dev, noRange)
	wantErrno(t, "enable without profiles", dev.EnableService(nr, true), syscall.EINVAL)
	noRange.NumVldVNIs = 0
	nr0 := mustAlloc(t, dev, noRange)
	wantErrno(t, "enable with nothing to enable", dev.EnableService(nr0, true), 0)
}

func TestSetInUse(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{})
	off := podDesc()
	off.RestrictedVNIs = false
	id := mustAlloc(t, dev, off)
	wantErrno(t, "disabled", s.SetInUse(id, 1), syscall.EKEYREVOKED)
	wantErrno(t, "default (disabled)", s.SetInUse(1, 1), syscall.EKEYREVOKED)
	wantErrno(t, "unknown", s.SetInUse(42, 1), syscall.EINVAL)
	wantErrno(t, "negative", s.SetInUse(id, -1), syscall.EINVAL)
}

func TestDestroyRules(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{})
	a := mustAlloc(t, dev, podDesc(1024))
	b := mustAlloc(t, dev, podDesc(1025))
	if a != 2 || b != 3 {
		t.Fatalf("ids %d, %d; want 2, 3", a, b)
	}
	if err := s.SetInUse(a, 2); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "in use", dev.DestroyService(a), syscall.EBUSY)
	if err := s.SetInUse(a, 0); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "destroy", dev.DestroyService(a), 0)
	wantErrno(t, "destroy again", dev.DestroyService(a), syscall.EINVAL)
	wantErrno(t, "unknown", dev.DestroyService(0), syscall.EINVAL)
	// IDs are the lowest free, so 2 comes back.
	if c := mustAlloc(t, dev, podDesc(1026)); c != a {
		t.Fatalf("new id %d, want the freed %d", c, a)
	}
}

func TestNetnsRules(t *testing.T) {
	const ns = 4026532000
	netnsDesc := func() uapi.SvcDesc {
		d := podDesc(1024)
		d.Members[0] = uapi.SvcMember{}
		return d
	}
	tests := []struct {
		name  string
		desc  func() uapi.SvcDesc
		steps func(t *testing.T, dev *uapi.Device, id uint32)
	}{
		{"disable, set, enable", netnsDesc, func(t *testing.T, dev *uapi.Device, id uint32) {
			_, err := dev.GetNetns(id)
			wantErrno(t, "get before set", err, syscall.EINVAL)
			wantErrno(t, "disable", dev.EnableService(id, false), 0)
			wantErrno(t, "set", dev.SetNetns(id, ns), 0)
			wantErrno(t, "enable", dev.EnableService(id, true), 0)
			got, err := dev.GetNetns(id)
			if err != nil || got != ns {
				t.Fatalf("GetNetns = %d, %v", got, err)
			}
		}},
		{"enabled service", netnsDesc, func(t *testing.T, dev *uapi.Device, id uint32) {
			wantErrno(t, "set", dev.SetNetns(id, ns), syscall.EBUSY)
		}},
		{"uid member", func() uapi.SvcDesc { return podDesc(1024) }, func(t *testing.T, dev *uapi.Device, id uint32) {
			wantErrno(t, "disable", dev.EnableService(id, false), 0)
			wantErrno(t, "set", dev.SetNetns(id, ns), syscall.EEXIST)
		}},
		{"open membership", func() uapi.SvcDesc { d := netnsDesc(); d.RestrictedMembers = false; return d },
			func(t *testing.T, dev *uapi.Device, id uint32) {
				wantErrno(t, "disable", dev.EnableService(id, false), 0)
				wantErrno(t, "set", dev.SetNetns(id, ns), syscall.EEXIST)
			}},
		{"same namespace twice, then another", netnsDesc, func(t *testing.T, dev *uapi.Device, id uint32) {
			wantErrno(t, "disable", dev.EnableService(id, false), 0)
			wantErrno(t, "set", dev.SetNetns(id, ns), 0)
			wantErrno(t, "set again", dev.SetNetns(id, ns), syscall.EEXIST)
			wantErrno(t, "set lower", dev.SetNetns(id, ns-5), 0)
			got, err := dev.GetNetns(id)
			if err != nil || got != ns-5 {
				t.Fatalf("GetNetns = %d, %v; want the lowest", got, err)
			}
		}},
		{"inode -1", netnsDesc, func(t *testing.T, dev *uapi.Device, id uint32) {
			wantErrno(t, "disable", dev.EnableService(id, false), 0)
			wantErrno(t, "set", dev.SetNetns(id, 0xffffffff), syscall.EBADR)
		}},
		{"unknown service", netnsDesc, func(t *testing.T, dev *uapi.Device, id uint32) {
			wantErrno(t, "set", dev.SetNetns(id+1, ns), syscall.EINVAL)
		}},
		{"VNI range service without its range", func() uapi.SvcDesc { d := netnsDesc(); d.RestrictedVNIs = false; return d },
			func(t *testing.T, dev *uapi.Device, id uint32) {
				// The rgroup keeps the namespace although the profiles fail.
				wantErrno(t, "set", dev.SetNetns(id, ns), syscall.ENODATA)
				got, err := dev.GetNetns(id)
				if err != nil || got != ns {
					t.Fatalf("GetNetns = %d, %v", got, err)
				}
				wantErrno(t, "set again", dev.SetNetns(id, ns), syscall.EEXIST)
			}},
		{"NET_NS member in the descriptor uses the union", func() uapi.SvcDesc {
			d := netnsDesc()
			d.Members[0] = uapi.SvcMember{Type: uapi.MemberNetNS, ID: ns}
			return d
		}, func(t *testing.T, dev *uapi.Device, id uint32) {
			got, err := dev.GetNetns(id)
			if err != nil || got != 0 {
				t.Fatalf("GetNetns = %d, %v; the driver admits inode 0", got, err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, dev := open(t, t.TempDir(), Options{NoSync: true})
			tc.steps(t, dev, mustAlloc(t, dev, tc.desc()))
		})
	}
}

func TestListTwoPhase(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{})
	for i := range 3 {
		mustAlloc(t, dev, podDesc(uint16(1024+i)))
	}
	resp := make([]byte, 4)
	list := make([]byte, 2*uapi.SvcDescSize)
	for i := range list {
		list[i] = 0xee
	}
	cmd := marshal(t, uapi.SvcListGetCmd{Count: 2})
	putPtr(cmd, uapi.RespOffset, resp)
	putPtr(cmd, uapi.ListOffset, list)
	if _, err := s.Write(cmd); err != nil {
		t.Fatal(err)
	}
	if r, _ := uapi.DecodeSvcListGetResp(resp); r.Count != 4 {
		t.Fatalf("count = %d, want 4", r.Count)
	}
	if list[0] != 0xee {
		t.Fatal("the driver copied a list into a buffer that was too small")
	}
	// Room for more than there are: it copies what there is.
	big := make([]byte, 10*uapi.SvcDescSize)
	cmd = marshal(t, uapi.SvcListGetCmd{Count: 10})
	putPtr(cmd, uapi.RespOffset, resp)
	putPtr(cmd, uapi.ListOffset, big)
	if _, err := s.Write(cmd); err != nil {
		t.Fatal(err)
	}
	descs, err := uapi.DecodeSvcList(big[:4*uapi.SvcDescSize])
	if err != nil || descs[0].SvcID != 1 || descs[3].SvcID != 4 || descs[3].VNIs[0] != 1026 {
		t.Fatalf("list = %+v, %v", descs, err)
	}
	// A big enough count with a nil list pointer faults.
	cmd = marshal(t, uapi.SvcListGetCmd{Count: 10})
	putPtr(cmd, uapi.RespOffset, resp)
	if _, err := s.Write(cmd); !errors.Is(err, syscall.EFAULT) {
		t.Fatalf("nil list: %v, want EFAULT", err)
	}
	got, err := dev.ListServices()
	if err != nil || len(got) != 4 {
		t.Fatalf("ListServices = %d, %v", len(got), err)
	}
}

func TestPersistence(t *testing.T) {
	dir := t.TempDir()
	s1, err := Open(dir, "cxi0", Options{NoEthernetService: true})
	if err != nil {
		t.Fatal(err)
	}
	dev1 := uapi.NewDevice(s1)
	id := mustAlloc(t, dev1, podDesc(1024))
	if err := s1.SetInUse(id, 3); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Write(marshal(t, uapi.SvcDestroyCmd{SvcID: id})); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("write after Close: %v, want EBADF", err)
	}
	// Options that shape a new NIC do not change an existing one.
	s2, _ := open(t, dir, Options{DefaultServiceEnabled: true})
	svcs, err := s2.Services()
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 || svcs[1].Desc.SvcID != id || svcs[1].LNIs != 3 || svcs[0].Desc.Enable {
		t.Fatalf("after reopen: %+v", svcs)
	}
	wantErrno(t, "destroy in use after restart", uapi.NewDevice(s2).DestroyService(id), syscall.EBUSY)
	// Another name in the same directory is another NIC.
	s3, err := Open(dir, "cxi1", Options{NoEthernetService: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if svcs, _ := s3.Services(); len(svcs) != 1 {
		t.Fatalf("cxi1 has %d services, want only the default", len(svcs))
	}
	if _, err := Open(dir, "../x", Options{}); err == nil {
		t.Fatal("Open accepted a path as a name")
	}
}

func TestCorruptStateIsEIO(t *testing.T) {
	dir := t.TempDir()
	s, dev := open(t, dir, Options{})
	if err := os.WriteFile(s.statePath, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := dev.GetService(1)
	wantErrno(t, "get", err, syscall.EIO)
}

// TestConcurrentDevices has goroutines, each with its own Device on one
// state directory (separate flocks, as separate processes would have),
// create and destroy services; no two may ever get the same ID.
func TestConcurrentDevices(t *testing.T) {
	dir := t.TempDir()
	const workers, rounds = 4, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			s, err := Open(dir, "cxi0", Options{NoSync: true, NoEthernetService: true})
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			dev := uapi.NewDevice(s)
			for r := range rounds {
				vni := uint16(2000 + w*100 + r)
				id, _, err := dev.AllocService(podDesc(vni))
				if err != nil {
					errs <- err
					return
				}
				d, err := dev.GetService(id)
				if err != nil || d.VNIs[0] != vni {
					errs <- fmt.Errorf("service %d has VNI %d, want %d (%v)", id, d.VNIs[0], vni, err)
					return
				}
				if r%2 == 0 {
					if err := dev.DestroyService(id); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s, _ := open(t, dir, Options{})
	svcs, err := s.Services()
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + workers*rounds/2; len(svcs) != want {
		t.Fatalf("%d services, want %d", len(svcs), want)
	}
}

// TestAcrossProcesses runs this test binary twice more as child processes
// that allocate services on the same state directory at the same time.
func TestAcrossProcesses(t *testing.T) {
	if os.Getenv("CXI_SIM_HELPER_DIR") != "" {
		t.Skip("in a helper process")
	}
	dir := t.TempDir()
	const perChild = 10
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for c := range 2 {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			"CXI_SIM_HELPER_DIR="+dir,
			"CXI_SIM_HELPER_BASE="+strconv.Itoa(3000+c*100),
			"CXI_SIM_HELPER_N="+strconv.Itoa(perChild))
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i])
		}
	}
	s, _ := open(t, dir, Options{})
	svcs, err := s.Services()
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 1+2*perChild {
		t.Fatalf("%d services, want %d", len(svcs), 1+2*perChild)
	}
	seen := map[uint16]bool{}
	for _, svc := range svcs[1:] {
		seen[svc.Desc.VNIs[0]] = true
	}
	if len(seen) != 2*perChild {
		t.Fatalf("%d distinct VNIs, want %d: a write was lost", len(seen), 2*perChild)
	}
}

// TestHelperProcess is the child of TestAcrossProcesses.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv("CXI_SIM_HELPER_DIR")
	if dir == "" {
		t.Skip("only run by TestAcrossProcesses")
	}
	base, _ := strconv.Atoi(os.Getenv("CXI_SIM_HELPER_BASE"))
	n, _ := strconv.Atoi(os.Getenv("CXI_SIM_HELPER_N"))
	s, err := Open(dir, "cxi0", Options{NoEthernetService: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dev := uapi.NewDevice(s)
	for i := range n {
		mustAlloc(t, dev, podDesc(uint16(base+i)))
	}
}

func TestWriteDebugServices(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{})
	d := podDesc(1024)
	d.Members[0] = uapi.SvcMember{}
	d.Limits[uapi.RsrcLE] = uapi.Limits{Max: 64, Res: 16}
	id := mustAlloc(t, dev, d)
	wantErrno(t, "disable", dev.EnableService(id, false), 0)
	wantErrno(t, "netns", dev.SetNetns(id, 4026532000), 0)
	wantErrno(t, "enable", dev.EnableService(id, true), 0)
	var out strings.Builder
	if err := s.WriteDebugServices(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Resources\n",
		"  Max     1022    2047    2047    2048     512    1024   16384   16384   16384   16384    2048\n",
		"  Res        0       0       0       0       0       0      16      16      16      16     512\n",
		"\nRgroups:\nID: 1\n  Name:default\n  State:Disabled\n",
		"ID: 2\n  Name:user\n  State:Enabled\n",
		"  LE pool IDs: 1 1 1 1  TLE pool ID: 0\n",
		"  AC-entries: ID:1 type:netns uid/gid:4026532000\n",
		"  AC-entries: ID:1 type:open uid/gid:0\n",
		"  svc:2 VNI:1024 state:enabled\n",
		"RMU VNI-list entries in use: 1 of 256\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("listing lacks %q\n%s", want, out.String())
		}
	}
}

func TestOpenFailsOnBadMaxima(t *testing.T) {
	var max [uapi.NumRsrcTypes]uint16
	max[uapi.RsrcTLE] = 100 // less than the default service's 512 TLEs
	_, err := Open(t.TempDir(), "cxi0", Options{Max: max})
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Open: %v, want EINVAL from the default service", err)
	}
}
