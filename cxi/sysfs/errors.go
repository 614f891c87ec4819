package sysfs

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
// what the driver writes (garbage, out of range, unknown device). Parse
// errors wrap it.
var ErrInvalidValue = errors.New("invalid value")

// AttrError is the error for one sysfs attribute, link or directory.
//
// Path is relative to the sysfs root, as given to [Discover], for example
// "class/cxi/cxi0/device/properties/nid". Err is the cause: an [fs] error
// (errors.Is(err, fs.ErrNotExist), fs.ErrPermission, ...) for a file that
// could not be read, or an error wrapping [ErrInvalidValue] for content that
// could not be parsed.
type AttrError struct {
	Path string
	Err  error
}

func (e *AttrError) Error() string {
	return fmt.Sprintf("sysfs %s: %v", e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *AttrError) Unwrap() error { return e.Err }

// Is reports whether the error is [ErrMissing]: the file does not exist.
// Other targets are matched through [AttrError.Unwrap].
func (e *AttrError) Is(target error) bool {
	return target == ErrMissing && errors.Is(e.Err, fs.ErrNotExist)
}

// attrErr builds an AttrError for path p. When err is an *fs.PathError its
// own path (which repeats p, or a resolved form of it) is dropped so the
// message names the file once.
func attrErr(p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &AttrError{Path: p, Err: err}
}

// invalid returns an error wrapping ErrInvalidValue for the text s.
func invalid(s string, why string) error {
	const maxShown = 40
	if len(s) > maxShown {
		s = s[:maxShown] + "..."
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidValue, s, why)
}
