package pin

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

var (
	// ErrStale: a holder's pin file holds no namespace, a plain empty
	// file left by a crash between its creation and the mount. It has
	// been removed by the time the error is returned; the namespace it
	// was meant to hold is not held.
	ErrStale = errors.New("pin file holds no namespace")
	// ErrNotNetns: what was to be pinned, or what a pin file holds, is
	// not a network namespace (an nsfs inode of type net).
	ErrNotNetns = errors.New("not a network namespace")
)

// Namespace is an open network namespace: an *os.File of
// /proc/<pid>/ns/net, or a netns.Handle.
type Namespace interface {
	Fd() uintptr
}

// Pins keeps the pins of one directory. See the package doc.
type Pins struct {
	dir  string
	prop Propagation
	mu   sync.Mutex // serializes every change of the directory's files
}

// New returns the Pins of dir, an absolute path, creating the directory
// and making it a shared mount point ([Prepare]). Pins an earlier Pins of
// dir made, in this process or one before, are the new one's.
func New(dir string) (*Pins, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("pin directory %q: not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pin directory: %w", err)
	}
	prop, err := Prepare(dir)
	if err != nil {
		return nil, err
	}
	return &Pins{dir: dir, prop: prop}, nil
}

// Dir returns the directory of the pins.
func (p *Pins) Dir() string { return p.dir }

// Propagation returns how the directory was mounted when New prepared it.
func (p *Pins) Propagation() Propagation { return p.prop }

// Pin pins the network namespace ns is open on for holder and returns its
// inode. It is idempotent: pinned already, nothing changes. A pin of
// another namespace is replaced, the new namespace held before the old is
// let go (see the package doc). It returns an error wrapping
// [ErrNotNetns] when ns is not a network namespace, or [ErrBadHolder].
// ns stays the caller's to close.
func (p *Pins) Pin(holder string, ns Namespace) (uint32, error) {
	fd := ns.Fd()
	if fd == ^uintptr(0) {
		return 0, fmt.Errorf("pin %q: namespace closed", holder)
	}
	defer runtime.KeepAlive(ns) // the descriptor is used by number below
	ino, err := netnsInode(int(fd), "namespace to pin")
	if err != nil {
		return 0, fmt.Errorf("pin %q: %w", holder, err)
	}
	if err := p.pin(holder, int(fd), ino); err != nil {
		return 0, fmt.Errorf("pin %q (namespace %d): %w", holder, ino, err)
	}
	return ino, nil
}

// PinPath pins the network namespace at path, /proc/<pid>/ns/net or a
// bind mount of one, as [Pins.Pin] does. The namespace is opened once,
// and what was checked is what is pinned, even where the process exits
// and its PID is taken meanwhile.
func (p *Pins) PinPath(holder, path string) (uint32, error) {
	f, err := openNetns(path)
	if err != nil {
		return 0, fmt.Errorf("pin %q: %w", holder, err)
	}
	defer f.Close()
	return p.Pin(holder, f)
}

func (p *Pins) pin(holder string, fd int, ino uint32) error {
	final, err := p.path(holder)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return fmt.Errorf("pin directory: %w", err)
	}
	cur, err := settle(final)
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrStale) {
		return err
	}
	src := "/proc/self/fd/" + strconv.Itoa(fd)
	switch {
	case cur == ino:
		return nil
	case cur == 0:
		return mountOn(src, final, ino, true)
	}
	// Another namespace is pinned: the new one is held on tmp before the
	// old goes, since a mount point cannot be renamed over.
	tmp := final + tmpSuffix
	if err := mountOn(src, tmp, ino, true); err != nil {
		return err
	}
	if err := unmountAll(final); err != nil {
		return errors.Join(err, drop(tmp))
	}
	// From here a crash leaves tmp the holder's pin, which settle moves
	// to final.
	if err := mountOn(tmp, final, ino, false); err != nil {
		return fmt.Errorf("%w (the namespace stays pinned on %s)", err, tmp)
	}
	return drop(tmp)
}

// Open returns a [Handle] on the namespace pinned for holder, to hold it
// by a descriptor too, or to act in it. It returns an error matching
// [fs.ErrNotExist] when holder has no pin, wrapping [ErrStale] when its
// file held no namespace (the file is removed), [ErrNotNetns] when it
// holds another kind of file, or [ErrBadHolder].
func (p *Pins) Open(holder string) (*Handle, error) {
	final, err := p.path(holder)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := settle(final); err != nil {
		return nil, fmt.Errorf("open pin of %q: %w", holder, err)
	}
	s, err := look(final, true)
	if err != nil {
		return nil, fmt.Errorf("open pin of %q: %w", holder, err)
	}
	if s.file == nil {
		return nil, fmt.Errorf("open pin of %q: %s changed while it was opened", holder, final)
	}
	return &Handle{f: s.file, ino: s.ino}, nil
}

// Inode returns the inode of the namespace pinned for holder, holding
// nothing: a caller asks "does the pin hold X" without keeping a
// descriptor. The number stays that namespace's as long as the pin
// stays. Errors as [Pins.Open].
func (p *Pins) Inode(holder string) (uint32, error) {
	final, err := p.path(holder)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ino, err := settle(final)
	if err != nil {
		return 0, fmt.Errorf("pin of %q: %w", holder, err)
	}
	return ino, nil
}

// Holds reports whether holder's pin holds the namespace of inode ino.
// No pin, or a stale one (then removed), is false without an error.
func (p *Pins) Holds(holder string, ino uint32) (bool, error) {
	got, err := p.Inode(holder)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrStale) {
		return false, nil
	}
	return err == nil && got == ino, err
}

// Unpin lets holder's namespace go: its pin is unmounted, detached so
// that a descriptor opened through it does not keep the file busy, and
// removed. The namespace lives on while anything else holds it. No pin
// is no error.
func (p *Pins) Unpin(holder string) error {
	final, err := p.path(holder)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := errors.Join(drop(final), drop(final+tmpSuffix)); err != nil {
		return fmt.Errorf("unpin %q: %w", holder, err)
	}
	// A long name's directories, once empty; a non-empty one stays.
	for d := filepath.Dir(final); d != p.dir; d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
	}
	return nil
}

// List returns the holders pinned, sorted. Files it finds in a state a
// crash left are settled on the way (see the package doc): stale ones
// removed, not listed. It lists what it could even with an error, which
// names the files it could not read or does not know.
func (p *Pins) List() ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[string]bool{}
	var errs []error
	walkErr := filepath.WalkDir(p.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		if path == p.dir {
			return nil
		}
		if d.IsDir() {
			if !strings.HasSuffix(d.Name(), dirMark) {
				errs = append(errs, fmt.Errorf("%s: a directory no pin name has", path))
				return fs.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(p.dir, path)
		holder, err := HolderOf(strings.TrimSuffix(rel, tmpSuffix))
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		seen[holder] = true
		return nil
	})
	if walkErr != nil {
		errs = append(errs, walkErr)
	}
	var holders []string
	for h := range seen {
		final, err := p.path(h)
		if err == nil {
			_, err = settle(final)
		}
		switch {
		case err == nil:
			holders = append(holders, h)
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, ErrStale):
		default:
			errs = append(errs, fmt.Errorf("pin of %q: %w", h, err))
		}
	}
	sort.Strings(holders)
	if err := errors.Join(errs...); err != nil {
		return holders, fmt.Errorf("list pins in %s: %w", p.dir, err)
	}
	return holders, nil
}

// path returns the absolute path of holder's pin.
func (p *Pins) path(holder string) (string, error) {
	rel, err := FileName(holder)
	if err != nil {
		return "", err
	}
	return filepath.Join(p.dir, rel), nil
}

// Handle is an open descriptor of a pinned namespace: it holds the
// namespace as [netns.Handle] does, until closed, whatever becomes of the
// pin. Safe for concurrent use.
type Handle struct {
	f   *os.File
	ino uint32
}

// Inode returns the namespace's inode; 0 for a nil Handle.
func (h *Handle) Inode() uint32 {
	if h == nil {
		return 0
	}
	return h.ino
}

// Fd returns the held descriptor, or ^uintptr(0) once closed or for a
// nil Handle.
func (h *Handle) Fd() uintptr {
	if h == nil {
		return ^uintptr(0)
	}
	return h.f.Fd()
}

// Close releases the descriptor; the pin stays. Closing again is no
// error.
func (h *Handle) Close() error {
	if h == nil {
		return nil
	}
	if err := h.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("close pinned namespace %d: %w", h.ino, err)
	}
	return nil
}

// settle brings the files of the pin at final to one of two states, a
// pin on final and no tmp file, or neither file, and returns the inode
// pinned. A pin on final wins; else a pin on tmp, left by a replacement
// that had dropped the old pin, is moved to final. A file that is neither
// a pin nor an empty file is left alone, an error. It returns an error
// matching fs.ErrNotExist when nothing is pinned, or wrapping ErrStale
// when final was a plain file (then removed).
func settle(final string) (uint32, error) {
	tmp := final + tmpSuffix
	f, err := look(final, false)
	if err != nil {
		return 0, err
	}
	t, err := look(tmp, false)
	if err != nil {
		return 0, err
	}
	switch {
	case f.ino != 0:
		if t.exists {
			return f.ino, drop(tmp)
		}
		return f.ino, nil
	case t.ino != 0:
		if err := mountOn(tmp, final, t.ino, !f.exists); err != nil {
			return 0, err
		}
		return t.ino, drop(tmp)
	}
	if err := drop(tmp); err != nil {
		return 0, err
	}
	if !f.exists {
		return 0, &fs.PathError{Op: "open pin", Path: final, Err: fs.ErrNotExist}
	}
	if err := os.Remove(final); err != nil {
		return 0, fmt.Errorf("%w: %s; remove it: %w", ErrStale, final, err)
	}
	return 0, fmt.Errorf("%w: %s (removed)", ErrStale, final)
}

// state is what look found at a path: nothing (!exists), an empty plain
// file (exists, ino 0), or a pin of the network namespace ino. With keep,
// file is a descriptor of the pinned namespace, the caller's to close.
type state struct {
	exists bool
	ino    uint32
	file   *os.File
}

// look tells what is at p, following no symbolic link: a link, a
// directory, a non-empty file or a mount of something other than a
// network namespace is an error, never taken for a pin or a stale file.
func look(p string, keep bool) (state, error) {
	pfd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return state{}, nil
	}
	if err != nil {
		return state{}, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return state{}, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(pfd, &sfs); err != nil {
		return state{}, &fs.PathError{Op: "statfs", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return state{}, fmt.Errorf("%s: not a pin (mode %#o)", p, st.Mode)
	}
	if sfs.Type != unix.NSFS_MAGIC {
		if st.Size != 0 {
			return state{}, fmt.Errorf("%s: not a pin (a file of %d bytes)", p, st.Size)
		}
		return state{exists: true}, nil
	}
	// An nsfs inode: only an ioctl on a descriptor that is not O_PATH
	// tells its type. Opened through the O_PATH one, it is the inode
	// just looked at.
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(pfd), os.O_RDONLY, 0)
	if err != nil {
		return state{}, fmt.Errorf("open pin: %w", err)
	}
	ino, err := netnsInode(int(f.Fd()), p)
	if err == nil && uint64(ino) != st.Ino {
		err = fmt.Errorf("%s changed while it was read", p)
	}
	if err != nil || !keep {
		_ = f.Close()
		if err != nil {
			return state{}, err
		}
		f = nil
	}
	return state{exists: true, ino: ino, file: f}, nil
}

// netnsInode returns the inode of the network namespace fd is open on. It
// returns an error wrapping ErrNotNetns when fd is not on one.
func netnsInode(fd int, name string) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return 0, &fs.PathError{Op: "statfs", Path: name, Err: err}
	}
	if sfs.Type != unix.NSFS_MAGIC || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("%w: %s is not an nsfs inode (file system magic %#x)", ErrNotNetns, name, sfs.Type)
	}
	if st.Ino == 0 || st.Ino > math.MaxUint32 {
		return 0, fmt.Errorf("%w: %s: inode %d out of range", ErrNotNetns, name, st.Ino)
	}
	typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		return 0, &fs.PathError{Op: "NS_GET_NSTYPE", Path: name, Err: err}
	}
	if typ != unix.CLONE_NEWNET {
		return 0, fmt.Errorf("%w: %s is a namespace of type %#x", ErrNotNetns, name, typ)
	}
	return uint32(st.Ino), nil
}

// openNetns opens the network namespace at p, looking at what p names
// before opening it for reading: a FIFO or a device is never opened.
func openNetns(p string) (*os.File, error) {
	pfd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(pfd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(pfd, &sfs); err != nil {
		return nil, &fs.PathError{Op: "statfs", Path: p, Err: err}
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return nil, fmt.Errorf("%w: %s is not an nsfs inode (file system magic %#x)", ErrNotNetns, p, sfs.Type)
	}
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(pfd), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return f, nil
}

// mountOn binds src, a namespace file, on dst, creating dst first when
// create, and checks that dst then holds the namespace ino. On an error
// dst is left as it was before.
func mountOn(src, dst string, ino uint32, create bool) error {
	if create {
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("create pin file: %w", err)
		}
		if err := f.Close(); err != nil {
			return errors.Join(fmt.Errorf("create pin file: %w", err), os.Remove(dst))
		}
	}
	undo := func(err error) error {
		if create {
			return errors.Join(err, drop(dst))
		}
		return errors.Join(err, unmountAll(dst))
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return undo(fmt.Errorf("bind %s on %s: %w", src, dst, err))
	}
	s, err := look(dst, false)
	if err == nil && s.ino != ino {
		err = fmt.Errorf("%s holds namespace %d once bound, not %d", dst, s.ino, ino)
	}
	if err != nil {
		return undo(err)
	}
	return nil
}

// maxStacked bounds the mounts unmountAll takes off one file; more than
// one is found only where something other than Pins mounted there.
const maxStacked = 16

// unmountAll unmounts every mount on p, detached: a descriptor opened
// through a pin does not keep it busy. No mount there is no error.
func unmountAll(p string) error {
	for range maxStacked {
		err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		switch {
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // no mount (left) on p
		case err != nil:
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after %d unmounts", p, maxStacked)
}

// drop unmounts and removes the file p; absent is no error.
func drop(p string) error {
	if err := unmountAll(p); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove pin file: %w", err)
	}
	return nil
}
