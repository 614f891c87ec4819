package uapi

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"unsafe"
)

// writerFunc adapts a function to io.Writer.
type writerFunc func(b []byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// ptrAt reads the user pointer stored at off, as the kernel would.
func ptrAt(b []byte, off int) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&b[off]))
}

// respond writes data through the pointer at off.
func respond(t *testing.T, b []byte, off int, data []byte) {
	t.Helper()
	if len(data) == 0 {
		return // copy_to_user of nothing succeeds, whatever the pointer
	}
	p := ptrAt(b, off)
	if p == nil {
		t.Fatalf("nil pointer at offset %d", off)
	}
	copy(unsafe.Slice((*byte)(p), len(data)), data)
}

func TestDeviceAllocWritesThroughResponsePointer(t *testing.T) {
	var seen SvcAllocCmd
	dev := NewDevice(writerFunc(func(b []byte) (int, error) {
		if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
			t.Error("command is not 8-byte aligned")
		}
		cmd, err := DecodeSvcAlloc(b)
		if err != nil {
			t.Fatal(err)
		}
		seen = cmd
		resp, _ := SvcAllocResp{SvcID: 17}.MarshalBinary()
		respond(t, b, RespOffset, resp)
		return len(b), nil
	}))
	want := goldenAllocDesc()
	id, fail, err := dev.AllocService(want)
	if err != nil || id != 17 || !fail.IsZero() {
		t.Fatalf("AllocService = %d, %+v, %v; want 17", id, fail, err)
	}
	if seen.Desc != want {
		t.Fatalf("driver saw %+v, want %+v", seen.Desc, want)
	}
}

func TestDeviceAllocReturnsFailInfo(t *testing.T) {
	dev := NewDevice(writerFunc(func(b []byte) (int, error) {
		resp, _ := SvcAllocResp{Fail: FailInfo{NoTLEPools: true}}.MarshalBinary()
		respond(t, b, RespOffset, resp)
		return 0, syscall.ENOSPC
	}))
	_, fail, err := dev.AllocService(SvcDesc{})
	if !errors.Is(err, syscall.ENOSPC) || !fail.NoTLEPools {
		t.Fatalf("err = %v, fail = %+v; want ENOSPC with no_tle_pools", err, fail)
	}
}

func TestDeviceErrors(t *testing.T) {
	tests := []struct {
		name string
		w    writerFunc
		want error
	}{
		{"errno", func([]byte) (int, error) { return 0, syscall.EBUSY }, syscall.EBUSY},
		{"short write", func(b []byte) (int, error) { return len(b) - 1, nil }, syscall.EIO},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := NewDevice(tc.w)
			if err := dev.DestroyService(5); !errors.Is(err, tc.want) {
				t.Fatalf("DestroyService: %v, want %v", err, tc.want)
			}
			if _, err := dev.GetService(5); !errors.Is(err, tc.want) {
				t.Fatalf("GetService: %v, want %v", err, tc.want)
			}
		})
	}
	// A driver that claims success with service ID 0 broke the protocol.
	dev := NewDevice(writerFunc(func(b []byte) (int, error) { return len(b), nil }))
	if _, _, err := dev.AllocService(SvcDesc{}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("AllocService with ID 0: %v, want EIO", err)
	}
	if _, _, err := dev.AllocService(SvcDesc{CntrPoolID: 5}); !errors.Is(err, ErrRange) {
		t.Fatalf("AllocService with cntr_pool_id 5: %v, want ErrRange", err)
	}
}

// listDriver answers SVC_LIST_GET like the kernel, from a list that grows
// by grow entries after each of its first growCalls calls (all, if
// growCalls is 0).
type listDriver struct {
	t         *testing.T
	n         uint32
	grow      uint32
	growCalls int
	counts    []uint32
}

func (l *listDriver) Write(b []byte) (int, error) {
	cmd, err := DecodeSvcListGet(b)
	if err != nil {
		return 0, syscall.EINVAL
	}
	l.counts = append(l.counts, cmd.Count)
	n := l.n
	if l.growCalls == 0 || len(l.counts) <= l.growCalls {
		l.n += l.grow
	}
	resp, _ := SvcListGetResp{Count: n}.MarshalBinary()
	respond(l.t, b, RespOffset, resp)
	if cmd.Count < n {
		return len(b), nil
	}
	var list []byte
	for i := range n {
		list, _ = SvcDesc{SvcID: i + 1}.AppendBinary(list)
	}
	respond(l.t, b, ListOffset, list)
	return len(b), nil
}

func TestDeviceListCountThenFetch(t *testing.T) {
	// The count read sees 3; the list then grows to 4 and 5 before the
	// reads with room for 3 and 4, so the third fetch, with room for 5,
	// gets them all.
	drv := &listDriver{t: t, n: 3, grow: 1, growCalls: 2}
	descs, err := NewDevice(drv).ListServices()
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{0, 3, 4, 5}; !slices.Equal(drv.counts, want) {
		t.Fatalf("counts sent = %v, want %v", drv.counts, want)
	}
	if len(descs) != 5 || descs[4].SvcID != 5 {
		t.Fatalf("descs = %+v", descs)
	}

	stable := &listDriver{t: t, n: 2}
	descs, err = NewDevice(stable).ListServices()
	if err != nil || len(descs) != 2 || descs[1].SvcID != 2 {
		t.Fatalf("stable list = %+v, %v", descs, err)
	}
	if len(stable.counts) != 2 {
		t.Fatalf("stable list took %d writes, want 2", len(stable.counts))
	}

	runaway := &listDriver{t: t, n: 1, grow: 100}
	if _, err := NewDevice(runaway).ListServices(); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("ever-growing list: %v, want EAGAIN", err)
	}
	if len(runaway.counts) != maxListReads+1 {
		t.Fatalf("ever-growing list took %d writes, want %d", len(runaway.counts), maxListReads+1)
	}

	empty := &listDriver{t: t}
	if descs, err := NewDevice(empty).ListServices(); err != nil || len(descs) != 0 {
		t.Fatalf("empty list = %+v, %v", descs, err)
	}

	huge := &listDriver{t: t, n: MaxListServices + 1}
	if _, err := NewDevice(huge).ListServices(); !errors.Is(err, ErrRange) {
		t.Fatalf("absurd count: %v, want ErrRange", err)
	}
}

func TestOpenMissingDevice(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "cxi0"))
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Open: %v, want ENOENT", err)
	}
}

func TestOpenWritesToTheFile(t *testing.T) {
	// A regular file accepts the write like a device that ignores it;
	// this checks Open, the write path and Close (twice) without hardware.
	p := filepath.Join(t.TempDir(), "cxi0")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dev, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.DestroyService(3); err != nil {
		t.Fatalf("DestroyService on a plain file: %v", err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := dev.DestroyService(3); err == nil {
		t.Fatal("write after Close succeeded")
	}
}

// TestItem14WriteLengthIsTheCSizeNotPadded (issue 15, item 14) guards the length of each write(2):
// libcxi writes every command as write(fd, &cmd, sizeof(cmd)) (src/libcxi.c
// device_write), with no padding to 16 bytes or any other multiple, and the
// driver refuses any other length with EINVAL (cxi_user_core.c dispatch:
// cmd_in_len != req_size). So SVC_DESTROY is 8 bytes and SVC_SET_NETNS 12,
// and each write matches gcc's image of the struct, pointers aside.
func TestItem14WriteLengthIsTheCSizeNotPadded(t *testing.T) {
	golden := loadGolden(t)
	tests := []struct {
		name string
		call func(d *Device) error
	}{
		{"destroy", func(d *Device) error { return d.DestroyService(42) }},
		{"set_netns", func(d *Device) error { return d.SetNetns(12, 4026532000) }},
		{"enable", func(d *Device) error { return d.EnableService(11, true) }},
		{"get", func(d *Device) error { _, err := d.GetService(9); return err }},
		{"get_netns", func(d *Device) error { _, err := d.GetNetns(13); return err }},
		{"set_vni_range", func(d *Device) error { return d.SetVNIRange(14, 64, 127) }},
		{"get_vni_range", func(d *Device) error { _, _, err := d.GetVNIRange(15); return err }},
		{"alloc", func(d *Device) error { _, _, err := d.AllocService(goldenAllocDesc()); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var wrote []byte
			dev := NewDevice(writerFunc(func(b []byte) (int, error) {
				wrote = slices.Clone(b)
				if tc.name == "alloc" {
					resp, _ := SvcAllocResp{SvcID: 1}.MarshalBinary()
					respond(t, b, RespOffset, resp)
				}
				return len(b), nil
			}))
			if err := tc.call(dev); err != nil {
				t.Fatal(err)
			}
			want := golden[tc.name]
			if len(wrote) != len(want) {
				t.Fatalf("wrote %d bytes, want sizeof = %d", len(wrote), len(want))
			}
			if len(wrote) >= RespOffset+8 {
				clear(wrote[RespOffset : RespOffset+8]) // the response pointer
			}
			if !slices.Equal(wrote, want) {
				t.Fatalf("wrote %x, want gcc's %x", wrote, want)
			}
		})
	}
}
