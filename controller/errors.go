package controller

import (
	"errors"
	"fmt"
)

var (
	// ErrUnavailable is wrapped while state is not (yet) loaded.
	ErrUnavailable = errors.New("controller unavailable")
	// ErrInvalidArgument is wrapped by errors about a request's fields;
	// see [FieldError].
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrExhausted is wrapped when a range or pool is full.
	ErrExhausted = errors.New("resource exhausted")
	// ErrNotFound is wrapped when a pod or claim does not exist.
	ErrNotFound = errors.New("not found")
	// ErrOwnerGone is wrapped when a pod asks for the VNI of an owner that
	// is being deleted.
	ErrOwnerGone = errors.New("owner is gone")
	// ErrNamespaceFull is wrapped when a namespace holds
	// Config.MaxLeasesPerNamespace leases; see [ExhaustedError].
	ErrNamespaceFull = errors.New("namespace lease cap reached")
	// ErrConfigConflict is wrapped when the configuration contradicts the
	// stored state (a range shrunk over live leases).
	ErrConfigConflict = errors.New("configuration conflicts with stored state")
)

// FieldError is an invalid request field. It matches ErrInvalidArgument.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason) }

// Is reports whether target is ErrInvalidArgument.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidArgument }

// ExhaustedError says which range is full, or which namespace holds as
// many leases as it may. It matches ErrExhausted and unwraps to the
// allocator's error, or to one wrapping ErrNamespaceFull.
type ExhaustedError struct {
	// Resource is "vni", the pool name, or "namespace" for the cap on the
	// leases of one namespace.
	Resource string
	// Range is the configured range, e.g. "1024-65535", or the namespace.
	Range string
	// Capacity is the number of VNIs or slices of the range, or the cap.
	Capacity int
	Err      error
}

func (e *ExhaustedError) Error() string { return e.Err.Error() }

// Is reports whether target is ErrExhausted.
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// Unwrap returns the allocator's error.
func (e *ExhaustedError) Unwrap() error { return e.Err }
