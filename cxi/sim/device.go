package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// stateVersion is the version of the JSON state file.
const stateVersion = 1

// Options describe the simulated device and its caller.
type Options struct {
	// VF makes the device a virtual function: admin commands fail with
	// EPERM and the others are answered from the physical function's
	// services, as the real VF driver asks its PF.
	VF bool
	// PF names the physical function a VF belongs to, in the same state
	// directory; empty means the VF's own name, which gives a VF view of
	// that simulated NIC.
	PF string
	// NotAdmin simulates a caller without CAP_SYS_ADMIN: admin commands
	// fail with EPERM.
	NotAdmin bool
	// Max holds the device's resource maxima by uapi.RsrcType; zero
	// entries take [DefaultMax]. Applied when the state is created.
	Max [uapi.NumRsrcTypes]uint16
	// DefaultServiceEnabled loads the "driver" with
	// disable_default_svc=0. Applied when the state is created.
	DefaultServiceEnabled bool
	// NoEthernetService leaves out the Ethernet system service that
	// cxi_eth creates beside the default one when the PF's hsn link comes
	// up: the NIC of a node without cxi_eth, or with its link down. By
	// default the NIC is as on a booted node, with service 2, the
	// Ethernet one, which user services then follow, so that callers
	// meet the services that are not theirs as they will on a real
	// node. Applied when the state is created.
	NoEthernetService bool
	// NoSync skips the fsyncs of each state update (the temporary file
	// is still renamed into place, so readers never see a torn file).
	// For tests that create many services; the state may then be lost
	// in a power failure, never in a process crash.
	NoSync bool
}

// Device is one simulated /dev/cxiN. It implements io.Writer with the
// driver's write(2) semantics; wrap it with uapi.NewDevice. It is safe for
// concurrent use, and Devices in other processes that share the state
// directory see the same NIC. Close releases it.
type Device struct {
	name      string
	opts      Options
	statePath string
	lockPath  string

	mu     sync.Mutex // serialises this Device's users of lock
	lock   *os.File
	closed bool

	// mem, when set, holds the encoded state instead of the file (tests
	// and fuzzing: the same encode/decode, no disk, no flock).
	mem *[]byte

	// cacheRaw is the state file as this Device last read or wrote it,
	// and cache its decoding: when the file still holds exactly these
	// bytes, a copy of cache saves decoding it again.
	cacheRaw []byte
	cache    *state
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// Open returns the simulated device name (for example "cxi0") whose state
// lives in stateDir, creating the directory and, on first use, the NIC
// with its default service.
func Open(stateDir, name string, opts Options) (*Device, error) {
	if !validName.MatchString(name) {
		return nil, fmt.Errorf("open simulated device %q: invalid name", name)
	}
	owner := name
	if opts.VF && opts.PF != "" {
		if !validName.MatchString(opts.PF) {
			return nil, fmt.Errorf("open simulated device %q: invalid PF name %q", name, opts.PF)
		}
		owner = opts.PF
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("open simulated device %s: %w", name, err)
	}
	d := &Device{
		name:      name,
		opts:      opts,
		statePath: filepath.Join(stateDir, owner+".json"),
		lockPath:  filepath.Join(stateDir, owner+".lock"),
	}
	lock, err := os.OpenFile(d.lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open simulated device %s: %w", name, err)
	}
	d.lock = lock
	// Create the NIC now, so that a bad Options fails here.
	if err := d.update(func(*state) (bool, syscall.Errno) { return false, 0 }); err != nil {
		lock.Close()
		return nil, fmt.Errorf("open simulated device %s: %w", name, err)
	}
	return d, nil
}

// OpenMemory returns a simulated device name whose state lives in this
// Device alone: the same commands, rules and state encoding as Open's,
// without the state file, its lock or their system calls, as the kernel
// driver holds its state in memory. Use Open where another process, or a
// VF's Device, must see the same NIC.
func OpenMemory(name string, opts Options) (*Device, error) {
	if !validName.MatchString(name) {
		return nil, fmt.Errorf("open simulated device %q: invalid name", name)
	}
	if opts.VF {
		return nil, fmt.Errorf("open simulated device %s: a VF shares its PF's state file; open it with Open", name)
	}
	d := &Device{name: name, opts: opts, mem: new([]byte)}
	if err := d.update(func(*state) (bool, syscall.Errno) { return false, 0 }); err != nil {
		return nil, fmt.Errorf("open simulated device %s: %w", name, err)
	}
	return d, nil
}

// Name returns the device's name, for example "cxi0".
func (d *Device) Name() string { return d.name }

// Close releases the device; later writes fail with EBADF. It is safe to
// call more than once.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	if d.lock == nil {
		return nil
	}
	return d.lock.Close()
}

// Write executes one command, like write(2) on /dev/cxiN: it returns
// len(cmd) or a syscall.Errno (wrapped with the cause when the state could
// not be read or written, EIO).
func (d *Device) Write(cmd []byte) (int, error) {
	if err := d.dispatch(cmd); err != nil {
		return 0, err
	}
	return len(cmd), nil
}

// adminOnly lists the modelled commands that need CAP_SYS_ADMIN on a PF.
var adminOnly = map[uapi.Op]bool{
	uapi.OpSvcAlloc: true, uapi.OpSvcDestroy: true, uapi.OpSvcEnable: true, uapi.OpSvcSetNetns: true,
	uapi.OpSvcSetVNIRange: true,
}

// noHandler lists the op codes the driver's command table leaves empty
// (the obsoleted telemetry and counter-pool commands).
var noHandler = map[uapi.Op]bool{35: true, 36: true, 39: true, 40: true, 41: true, 42: true, 46: true, 47: true}

// dispatch mirrors cxi_user_core.c dispatch() and the service handlers.
func (d *Device) dispatch(raw []byte) error {
	if len(raw) < 4 {
		return syscall.EINVAL
	}
	op, _ := uapi.PeekOp(raw)
	if op <= uapi.OpInvalid || op >= uapi.OpMax {
		return syscall.EINVAL
	}
	size, modelled := uapi.CmdSize(op)
	if noHandler[op] || !modelled {
		return syscall.EOPNOTSUPP
	}
	if len(raw) != size {
		return syscall.EINVAL
	}
	if adminOnly[op] && (d.opts.NotAdmin || d.opts.VF) {
		return syscall.EPERM
	}
	// Copy into aligned memory before reading the pointer fields.
	cmd := alignedBytes(len(raw))
	copy(cmd, raw)

	switch op {
	case uapi.OpSvcAlloc:
		c, err := uapi.DecodeSvcAlloc(cmd)
		if err != nil {
			return syscall.EINVAL
		}
		var resp uapi.SvcAllocResp
		var rc syscall.Errno
		err = d.update(func(st *state) (bool, syscall.Errno) {
			if errno := st.fire(op); errno != 0 {
				rc = errno
				return true, 0
			}
			id, fail, errno := st.alloc(c.Desc, "user")
			rc = errno
			if errno != 0 {
				resp.Fail = fail
				return false, 0
			}
			resp.SvcID = id
			return true, 0
		})
		if err != nil {
			return err
		}
		b, _ := resp.MarshalBinary()
		if errno := copyToUser(cmd, uapi.RespOffset, b); errno != 0 {
			return errno
		}
		return errOrNil(rc)

	case uapi.OpSvcDestroy:
		c, err := uapi.DecodeSvcDestroy(cmd)
		if err != nil {
			return syscall.EINVAL
		}
		return d.update(func(st *state) (bool, syscall.Errno) {
			if errno := st.fire(op); errno != 0 {
				return true, errno
			}
			errno := st.destroy(c.SvcID)
			return errno == 0, errno
		})

	case uapi.OpSvcEnable:
		c, err := uapi.DecodeSvcEnable(cmd)
		if err != nil {
			return syscall.EINVAL
		}
		return d.update(func(st *state) (bool, syscall.Errno) {
			if c.Enable {
				if errno := st.fire(op); errno != 0 {
					return true, errno
				}
			}
			// A failed enable leaves the service disabled: save either way.
			errno := st.setEnable(c.SvcID, c.Enable)
			return true, errno
		})

	case uapi.OpSvcSetNetns:
		c, err := uapi.DecodeSvcSetNetns(cmd)
		if err != nil {
			return syscall.EINVAL
		}
		return d.update(func(st *state) (bool, syscall.Errno) {
			if errno := st.fire(op); errno != 0 {
				return true, errno
			}
			return st.setNetns(c.SvcID, c.Netns)
		})

	case uapi.OpSvcSetVNIRange:
		c, err := uapi.DecodeSvcVNIRange(cmd)
		if err != nil {
			return syscall.EINVAL
		}
		return d.update(func(st *state) (bool, syscall.Errno) {
			return st.setVNIRange(c.SvcID, c.VNIMin, c.VNIMax)
		})

	case uapi.OpSvcGetVNIRange:
		return d.getVNIRange(cmd)

	case uapi.OpSvcGet:
		c, err := uapi.DecodeSvcGet(cmd)
		if err != nil {
			return syscall.EINVAL
		}
		var desc uapi.SvcDesc
		err = d.view(func(st *state) syscall.Errno {
			svc := st.find(c.SvcID)
			if svc == nil {
				return syscall.EINVAL
			}
			desc = svc.Desc
			return 0
		})
		if err != nil {
			return err
		}
		b, _ := desc.MarshalBinary()
		return errOrNil(copyToUser(cmd, uapi.RespOffset, b))

	case uapi.OpSvcGetNetns:
		c, err := uapi.DecodeSvcGetNetns(cmd)
		if err != nil {
			return syscall.EINVAL
		}
		var netns uint32
		err = d.view(func(st *state) (errno syscall.Errno) {
			netns, errno = st.getNetns(c.SvcID)
			return errno
		})
		if err != nil {
			return err
		}
		b, _ := uapi.ValueResp{Value: netns}.MarshalBinary()
		return errOrNil(copyToUser(cmd, uapi.RespOffset, b))

	case uapi.OpSvcListGet:
		c, err := uapi.DecodeSvcListGet(cmd)
		if err != nil {
			return syscall.EINVAL
		}
		var list []byte
		var n uint32
		err = d.view(func(st *state) syscall.Errno {
			n = uint32(len(st.Services))
			if c.Count < n {
				return 0 // too small a buffer: report the count only
			}
			for _, s := range st.Services {
				list, _ = s.Desc.AppendBinary(list)
			}
			return 0
		})
		if err != nil {
			return err
		}
		b, _ := uapi.SvcListGetResp{Count: n}.MarshalBinary()
		if errno := copyToUser(cmd, uapi.RespOffset, b); errno != 0 {
			return errno
		}
		return errOrNil(copyToUser(cmd, uapi.ListOffset, list))
	}
	return syscall.EOPNOTSUPP
}

// getVNIRange answers SVC_GET_VNI_RANGE.
func (d *Device) getVNIRange(cmd []byte) error {
	c, err := uapi.DecodeSvcVNIRange(cmd)
	if err != nil {
		return syscall.EINVAL
	}
	var r uapi.VNIRangeResp
	err = d.view(func(st *state) (errno syscall.Errno) {
		r.VNIMin, r.VNIMax, errno = st.getVNIRange(c.SvcID)
		return errno
	})
	if err != nil {
		return err
	}
	b, _ := r.MarshalBinary()
	return errOrNil(copyToUser(cmd, uapi.RespOffset, b))
}

func errOrNil(errno syscall.Errno) error {
	if errno == 0 {
		return nil
	}
	return errno
}

// alignedBytes returns n zero bytes aligned for pointer loads.
func alignedBytes(n int) []byte {
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), n)
}

// copyToUser writes data through the user pointer at offset off of the
// (aligned) command, like the kernel's copy_to_user: EFAULT for a nil
// pointer. It trusts a non-nil pointer to address len(data) writable
// bytes; the kernel would check, Go code cannot.
func copyToUser(cmd []byte, off int, data []byte) syscall.Errno {
	if len(data) == 0 {
		return 0
	}
	p := *(*unsafe.Pointer)(unsafe.Pointer(&cmd[off]))
	if p == nil {
		return syscall.EFAULT
	}
	copy(unsafe.Slice((*byte)(p), len(data)), data)
	return 0
}

// update runs fn on the NIC's state under an exclusive lock and saves the
// state when fn reports a change, even if fn also returns an errno (the
// driver does not roll back every partial step either).
func (d *Device) update(fn func(*state) (changed bool, errno syscall.Errno)) error {
	return d.locked(unix.LOCK_EX, func(st *state, created bool) error {
		changed, errno := fn(st)
		if changed || created {
			if err := d.save(st); err != nil {
				return err
			}
		}
		return errOrNil(errno)
	})
}

// view runs fn on the NIC's state under a shared lock; fn must not change
// the state, which may be this Device's cached copy. A missing state file
// reads as a freshly loaded driver, which is what the next update would
// create.
func (d *Device) view(fn func(*state) syscall.Errno) error {
	return d.locked(unix.LOCK_SH, func(st *state, _ bool) error {
		return errOrNil(fn(st))
	})
}

// locked loads the state under flock(mode) and calls fn with it; created
// reports that there was no state file yet.
func (d *Device) locked(mode int, fn func(st *state, created bool) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return syscall.EBADF
	}
	if d.mem != nil {
		st, created, err := d.load(mode == unix.LOCK_SH)
		if err != nil {
			return err
		}
		return fn(st, created)
	}
	fd := int(d.lock.Fd())
	if err := flock(fd, mode); err != nil {
		return stateErr("lock state", err)
	}
	defer func() { _ = flock(fd, unix.LOCK_UN) }()
	st, created, err := d.load(mode == unix.LOCK_SH)
	if err != nil {
		return err
	}
	return fn(st, created)
}

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// stateErr reports a failure of the simulation's own storage as EIO, with
// the cause attached.
func stateErr(what string, err error) error {
	return fmt.Errorf("simulated driver: %s: %w", what, errors.Join(syscall.EIO, err))
}

// load reads the state file; a missing file gives a freshly loaded driver.
// A readOnly caller may get the cached state itself instead of a copy.
func (d *Device) load(readOnly bool) (*state, bool, error) {
	var data []byte
	var err error
	if d.mem != nil {
		data = *d.mem
		if data == nil {
			err = fs.ErrNotExist
		}
	} else {
		data, err = os.ReadFile(d.statePath)
	}
	if errors.Is(err, fs.ErrNotExist) {
		st, errno := newState(d.opts)
		if errno != 0 {
			return nil, false, fmt.Errorf("simulated driver: create default service: %w", errno)
		}
		return st, true, nil
	}
	if err != nil {
		return nil, false, stateErr("read state", err)
	}
	if d.cache != nil && bytes.Equal(data, d.cacheRaw) {
		if readOnly {
			return d.cache, false, nil
		}
		return d.cache.clone(), false, nil
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, false, stateErr("parse "+d.statePath, err)
	}
	if st.Version != stateVersion {
		return nil, false, stateErr("parse "+d.statePath, fmt.Errorf("state version %d, want %d", st.Version, stateVersion))
	}
	if err := st.check(); err != nil {
		return nil, false, stateErr("check "+d.statePath, err)
	}
	d.remember(data, &st)
	return &st, false, nil
}

// remember caches the decoding of data (a copy, as callers change st).
func (d *Device) remember(data []byte, st *state) {
	d.cacheRaw, d.cache = data, st.clone()
}

// save replaces the state file atomically: temporary file, fsync, rename,
// fsync of the directory.
func (d *Device) save(st *state) error {
	data, err := encodeState(st)
	if err != nil {
		return stateErr("encode state", err)
	}
	if d.mem != nil {
		*d.mem = data
	} else if err := writeFileAtomic(d.statePath, data, !d.opts.NoSync); err != nil {
		d.cache, d.cacheRaw = nil, nil
		return stateErr("write state", err)
	}
	d.remember(data, st)
	return nil
}

func writeFileAtomic(path string, data []byte, sync bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if !sync {
		return nil
	}
	dirf, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer dirf.Close()
	return dirf.Sync()
}
