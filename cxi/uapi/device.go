package uapi

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// MaxListServices bounds the service count [Device.ListServices] accepts
// from the driver, so that a corrupt count cannot make it allocate without
// limit. Services are bounded in practice by the device's RGIDs and RX
// profile slots (hundreds).
const MaxListServices = 1 << 16

// maxListReads bounds the count-then-fetch loop of ListServices when the
// list keeps growing between reads.
const maxListReads = 8

// Device sends service commands to one CXI device: /dev/cxiN, or any
// writer that behaves like the driver's write(2) handler.
//
// Errors from the driver wrap its syscall.Errno, so errors.Is(err,
// unix.EBUSY) works. A Device is safe for concurrent use when its writer
// is.
type Device struct {
	w      io.Writer
	closer io.Closer

	closeOnce sync.Once
	closeErr  error
}

// Open opens the character device at path (for example /dev/cxi0) for
// reading and writing. The caller closes the Device.
func Open(path string) (*Device, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open cxi device: %w", err)
	}
	return &Device{w: f, closer: f}, nil
}

// NewDevice returns a Device that writes each command to w in one Write
// call. w must behave like the driver: read the command, write any
// response through the pointers in it before returning, and return
// len(cmd) on success or an error wrapping a syscall.Errno. Close does not
// close w.
func NewDevice(w io.Writer) *Device {
	return &Device{w: w}
}

// Close closes the device file opened by [Open]; it is safe to call more
// than once and returns the first close's error.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		if d.closer != nil {
			d.closeErr = d.closer.Close()
		}
	})
	return d.closeErr
}

// userPtr is a pointer field of a command and the Go memory it must point
// at while the driver runs.
type userPtr struct {
	off int
	buf []byte
}

// call writes one command. It copies cmd into 8-byte aligned memory, stores
// a real pointer to each buffer into its slot (nil for an empty buffer),
// and keeps the buffers pinned until the write returns: the only reference
// the driver sees lives in memory the garbage collector does not scan.
func (d *Device) call(op Op, cmd []byte, ptrs ...userPtr) error {
	b := alignedBytes(len(cmd))
	copy(b, cmd)

	var pinner runtime.Pinner
	defer pinner.Unpin()
	for _, p := range ptrs {
		if len(p.buf) == 0 {
			continue
		}
		target := unsafe.Pointer(unsafe.SliceData(p.buf))
		pinner.Pin(target)
		*(*unsafe.Pointer)(unsafe.Pointer(&b[p.off])) = target
	}

	n, err := d.w.Write(b)
	for _, p := range ptrs {
		runtime.KeepAlive(p.buf)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if n != len(b) {
		// libcxi treats a truncated write the same way.
		return fmt.Errorf("%s: wrote %d of %d bytes: %w", op, n, len(b), syscall.EIO)
	}
	return nil
}

// alignedBytes returns n zero bytes aligned for the pointer fields of the
// commands.
func alignedBytes(n int) []byte {
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), n)
}

// AllocService sends SVC_ALLOC and returns the new service's ID. On
// failure it also returns the driver's fail info, which explains ENOSPC
// (exhausted pools and what was still available). Needs CAP_SYS_ADMIN on a
// physical function; the error wraps EPERM otherwise.
func (d *Device) AllocService(desc SvcDesc) (id uint32, fail FailInfo, err error) {
	cmd, err := SvcAllocCmd{Desc: desc}.MarshalBinary()
	if err != nil {
		return 0, FailInfo{}, err
	}
	resp := make([]byte, SvcAllocRespSize)
	callErr := d.call(OpSvcAlloc, cmd, userPtr{RespOffset, resp})
	r, err := DecodeSvcAllocResp(resp)
	if err != nil {
		return 0, FailInfo{}, err
	}
	if callErr != nil {
		return 0, r.Fail, callErr
	}
	if r.SvcID == 0 {
		return 0, FailInfo{}, fmt.Errorf("%s: driver returned service ID 0: %w", OpSvcAlloc, syscall.EIO)
	}
	return r.SvcID, FailInfo{}, nil
}

// DestroyService sends SVC_DESTROY. The error wraps EBUSY while an LNI
// still uses the service, and EINVAL for the default service or an
// unknown ID.
func (d *Device) DestroyService(id uint32) error {
	cmd, _ := SvcDestroyCmd{SvcID: id}.MarshalBinary()
	return d.call(OpSvcDestroy, cmd)
}

// ListServices returns the descriptors of all services (and of other
// resource groups, which the driver reports as synthesized descriptors),
// the way libcxi reads them: one SVC_LIST_GET for the count, then one with
// a buffer, again with a larger buffer if the list grew in between (at
// most a few times; then the error wraps EAGAIN).
func (d *Device) ListServices() ([]SvcDesc, error) {
	count, err := d.listInto(0, nil)
	if err != nil {
		return nil, err
	}
	for range maxListReads {
		if count == 0 {
			return nil, nil
		}
		if count > MaxListServices {
			return nil, fmt.Errorf("%s: driver reports %d services: %w", OpSvcListGet, count, ErrRange)
		}
		list := make([]byte, int(count)*SvcDescSize)
		n, err := d.listInto(count, list)
		if err != nil {
			return nil, err
		}
		if n > count {
			count = n // the list grew between the two reads
			continue
		}
		return DecodeSvcList(list[:int(n)*SvcDescSize])
	}
	return nil, fmt.Errorf("%s: the list grew on each of %d reads: %w", OpSvcListGet, maxListReads, syscall.EAGAIN)
}

// listInto sends one SVC_LIST_GET with room for count descriptors in list
// and returns the count the driver reported.
func (d *Device) listInto(count uint32, list []byte) (uint32, error) {
	cmd, _ := SvcListGetCmd{Count: count}.MarshalBinary()
	resp := make([]byte, SvcListGetRespSize)
	if err := d.call(OpSvcListGet, cmd, userPtr{RespOffset, resp}, userPtr{ListOffset, list}); err != nil {
		return 0, err
	}
	r, err := DecodeSvcListGetResp(resp)
	return r.Count, err
}

// GetService sends SVC_GET and returns the service's descriptor. The error
// wraps EINVAL when no service has that ID.
func (d *Device) GetService(id uint32) (SvcDesc, error) {
	cmd, _ := SvcGetCmd{SvcID: id}.MarshalBinary()
	resp := make([]byte, SvcGetRespSize)
	if err := d.call(OpSvcGet, cmd, userPtr{RespOffset, resp}); err != nil {
		return SvcDesc{}, err
	}
	return DecodeSvcDesc(resp)
}

// EnableService sends SVC_ENABLE. The error wraps EBUSY while the service
// is in use and EINVAL for an unknown ID.
func (d *Device) EnableService(id uint32, enable bool) error {
	cmd, _ := SvcEnableCmd{SvcID: id, Enable: enable}.MarshalBinary()
	return d.call(OpSvcEnable, cmd)
}

// SetNetns sends SVC_SET_NETNS, admitting the network namespace with the
// given inode to a disabled service. The error wraps EEXIST when the
// service has uid, gid or open members or already has that namespace, and
// EBUSY when the service is enabled.
func (d *Device) SetNetns(id, inode uint32) error {
	cmd, _ := SvcSetNetnsCmd{SvcID: id, Netns: inode}.MarshalBinary()
	return d.call(OpSvcSetNetns, cmd)
}

// GetNetns sends SVC_GET_NETNS and returns the (lowest) network namespace
// inode admitted to the service. The error wraps EINVAL when the service
// does not exist or has no netns member.
func (d *Device) GetNetns(id uint32) (uint32, error) {
	cmd, _ := SvcGetNetnsCmd{SvcID: id}.MarshalBinary()
	resp := make([]byte, ValueRespSize)
	if err := d.call(OpSvcGetNetns, cmd, userPtr{RespOffset, resp}); err != nil {
		return 0, err
	}
	r, err := DecodeValueResp(resp)
	return r.Value, err
}

// SetVNIRange sends SVC_SET_VNI_RANGE: service id, allocated with
// restricted_vnis=0 and disabled until now, gets the VNIs vniMin to vniMax
// as one TX/RX profile; enable it afterwards. The error wraps EINVAL for a
// service with restricted VNIs, an unknown ID or a range that is not a
// power-of-two count aligned to its size, and EEXIST when the range
// overlaps a VNI or range of any service (the default one included).
func (d *Device) SetVNIRange(id, vniMin, vniMax uint32) error {
	cmd, _ := SvcVNIRangeCmd{Op: OpSvcSetVNIRange, SvcID: id, VNIMin: vniMin, VNIMax: vniMax}.MarshalBinary()
	return d.call(OpSvcSetVNIRange, cmd)
}

// GetVNIRange sends SVC_GET_VNI_RANGE and returns the service's VNI range.
// The error wraps EINVAL for an unknown ID or a service with restricted
// VNIs or no range, and ENOENT when setting its range failed.
func (d *Device) GetVNIRange(id uint32) (vniMin, vniMax uint32, err error) {
	cmd, _ := SvcVNIRangeCmd{Op: OpSvcGetVNIRange, SvcID: id}.MarshalBinary()
	resp := make([]byte, VNIRangeRespSize)
	if err := d.call(OpSvcGetVNIRange, cmd, userPtr{RespOffset, resp}); err != nil {
		return 0, 0, err
	}
	r, err := DecodeVNIRangeResp(resp)
	return r.VNIMin, r.VNIMax, err
}
