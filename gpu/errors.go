package gpu

import (
	"errors"

	"github.com/slingshot-k8s/slingshot/internal/pcisysfs"
)

// Sentinel errors. Discovery errors are [*AttrError]s that match
// ErrMissing or wrap ErrInvalidValue; the others are returned by
// [ForNode], [Carve] and [Carving.Payload].
var (
	// ErrMissing reports that a required attribute, link or directory does
	// not exist. An [*AttrError] whose cause is [fs.ErrNotExist] matches it.
	// It is the same value as cxi/sysfs's: both read PCI attributes through
	// one reader.
	ErrMissing = pcisysfs.ErrMissing
	// ErrInvalidValue reports that an attribute exists but its content is
	// not what the kernel or the driver writes.
	ErrInvalidValue = pcisysfs.ErrInvalidValue
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
// error for a file that could not be read (errors.Is(err, fs.ErrNotExist),
// which errors.Is(err, ErrMissing) reports), or an error wrapping
// [ErrInvalidValue] for content that could not be parsed.
type AttrError = pcisysfs.AttrError

const (
	fsSys  = pcisysfs.SysFS
	fsProc = "procfs"
)

// attrErr builds an AttrError. An *fs.PathError's own path, which repeats
// p, is dropped so the message names the file once.
func attrErr(fsName, p string, err error) error { return pcisysfs.NewAttrError(fsName, p, err) }

// invalid returns an error wrapping ErrInvalidValue for the text s.
func invalid(s, why string) error { return pcisysfs.Invalid(s, why) }
