package gpu

import (
	"errors"
	"fmt"
	"io/fs"
)

// Sentinel errors. Discovery errors are [*AttrError]s that match
// ErrMissing or wrap ErrInvalidValue; the others are returned by
// [ForNode], [Carve] and [Carving.Payload].
var (
	// ErrMissing reports that a required attribute, link or directory does
	// not exist. An [*AttrError] whose cause is [fs.ErrNotExist] matches it.
	ErrMissing = errors.New("missing")
	// ErrInvalidValue reports that an attribute exists but its content is
	// not what the kernel or the driver writes.
	ErrInvalidValue = errors.New("invalid value")
	// ErrNotInNodePool reports that the node has no entry in the GPU node
	// pool, so it offers no machine type.
	ErrNotInNodePool = errors.New("node is not in the GPU node pool")
	// ErrInvalidMachineType reports a machine type that cannot be carved:
	// unknown, or with a bad vendor, count or NIC count.
	ErrInvalidMachineType = errors.New("invalid machine type")
	// ErrInvalidMode reports a node pool mode other than ready,
	// maintenance and not-ready.
	ErrInvalidMode = errors.New("invalid node pool mode")
	// ErrUnknownUnit reports a unit ID that the carving does not hold.
	ErrUnknownUnit = errors.New("unknown unit")
	// ErrNoDeviceNode reports a GPU whose device node is unknown or absent
	// from the device root.
	ErrNoDeviceNode = errors.New("no device node")
	// ErrNoUUID reports a GPU selected by UUID whose UUID is unknown.
	ErrNoUUID = errors.New("no GPU UUID")
)

// AttrError is the error for one file, link or directory read during
// discovery.
//
// FS says which tree it belongs to: "sysfs" or "procfs". Path is relative to
// that tree's root, as given to [Discover], for example
// "bus/pci/devices/0000:17:00.0/numa_node" or
// "driver/nvidia/gpus/0000:17:00.0/information". Err is the cause: an [fs]
// error for a file that could not be read (errors.Is(err, fs.ErrNotExist)),
// or an error wrapping [ErrInvalidValue] for content that could not be
// parsed.
type AttrError struct {
	FS   string
	Path string
	Err  error
}

func (e *AttrError) Error() string { return fmt.Sprintf("%s %s: %v", e.FS, e.Path, e.Err) }

// Unwrap returns the cause.
func (e *AttrError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrMissing] and the file does not exist.
// Other targets are matched through [AttrError.Unwrap].
func (e *AttrError) Is(target error) bool {
	return target == ErrMissing && errors.Is(e.Err, fs.ErrNotExist)
}

const (
	fsSys  = "sysfs"
	fsProc = "procfs"
)

// attrErr builds an AttrError. An *fs.PathError's own path, which repeats
// p, is dropped so the message names the file once.
func attrErr(fsName, p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &AttrError{FS: fsName, Path: p, Err: err}
}

// invalid returns an error wrapping ErrInvalidValue for the text s.
func invalid(s, why string) error {
	const maxShown = 40
	if len(s) > maxShown {
		s = s[:maxShown] + "..."
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidValue, s, why)
}
