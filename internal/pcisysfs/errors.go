package pcisysfs

import (
	"errors"
	"fmt"
	"io/fs"
)

// ErrMissing reports that a required attribute, link or directory does not
// exist. An [*AttrError] whose cause is [fs.ErrNotExist] matches it with
// errors.Is.
var ErrMissing = errors.New("missing")

// ErrInvalidValue reports that an attribute exists but its content is not
// what the kernel or the driver writes (garbage, out of range). Every parse
// error wraps it.
var ErrInvalidValue = errors.New("invalid value")

// SysFS is the [AttrError.FS] of a file in the sysfs tree.
const SysFS = "sysfs"

// AttrError is the error for one file, link or directory.
//
// FS names the tree the file belongs to: [SysFS], or another the caller
// reads (gpu reads "procfs"); empty means sysfs. Path is relative to that
// tree's root, for example "class/cxi/cxi0/device/vendor" or
// "bus/pci/devices/0000:17:00.0/numa_node". Err is the cause: an [fs] error
// for a file that could not be read (errors.Is(err, fs.ErrNotExist), ...),
// or an error wrapping [ErrInvalidValue] for content that could not be
// parsed.
type AttrError struct {
	FS   string
	Path string
	Err  error
}

func (e *AttrError) Error() string {
	name := e.FS
	if name == "" {
		name = SysFS
	}
	return fmt.Sprintf("%s %s: %v", name, e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *AttrError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrMissing] and the file does not exist.
// Other targets are matched through [AttrError.Unwrap].
func (e *AttrError) Is(target error) bool {
	return target == ErrMissing && errors.Is(e.Err, fs.ErrNotExist)
}

// NewAttrError returns an *AttrError for path p of the tree fsName. When err
// is an *fs.PathError its own path (which repeats p, or a resolved form of
// it) is dropped, so that the message names the file once.
func NewAttrError(fsName, p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &AttrError{FS: fsName, Path: p, Err: err}
}

// Invalid returns an error wrapping [ErrInvalidValue] that quotes the text
// s (its first 40 bytes) and says why it was refused.
func Invalid(s, why string) error {
	const maxShown = 40
	if len(s) > maxShown {
		s = s[:maxShown] + "..."
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidValue, s, why)
}
