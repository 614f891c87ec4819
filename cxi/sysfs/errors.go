package sysfs

import (
	"github.com/slingshot-k8s/slingshot/internal/pcisysfs"
)

// ErrMissing reports that a required attribute, link or directory does not
// exist. An [*AttrError] whose cause is [fs.ErrNotExist] matches it with
// errors.Is. It is the same value as gpu.ErrMissing: both packages read
// PCI attributes through one reader.
var ErrMissing = pcisysfs.ErrMissing

// ErrInvalidValue reports that an attribute exists but its content is not
// what the driver writes (garbage, out of range, unknown device). Parse
// errors wrap it.
var ErrInvalidValue = pcisysfs.ErrInvalidValue

// AttrError is the error for one sysfs attribute, link or directory.
//
// Path is relative to the sysfs root, as given to [Discover], for example
// "class/cxi/cxi0/device/properties/nid"; FS is "sysfs". Err is the cause:
// an [fs] error (errors.Is(err, fs.ErrNotExist), fs.ErrPermission, ...) for
// a file that could not be read, or an error wrapping [ErrInvalidValue] for
// content that could not be parsed. errors.Is(err, ErrMissing) reports a
// file that does not exist.
type AttrError = pcisysfs.AttrError

// attrErr builds an AttrError for path p. When err is an *fs.PathError its
// own path (which repeats p, or a resolved form of it) is dropped so the
// message names the file once.
func attrErr(p string, err error) error { return pcisysfs.NewAttrError(pcisysfs.SysFS, p, err) }

// parseErr is the AttrError for content of p that could not be parsed.
func parseErr(p string, err error) error {
	return &AttrError{FS: pcisysfs.SysFS, Path: p, Err: err}
}

// invalid returns an error wrapping ErrInvalidValue for the text s.
func invalid(s string, why string) error { return pcisysfs.Invalid(s, why) }
