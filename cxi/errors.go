package cxi

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// Errors of the service layer. They wrap, rather than replace, the
// driver's syscall.Errno.
var (
	// ErrInvalidSpec: a ServiceSpec (or traffic-class string) breaks a
	// rule; nothing was sent to the driver.
	ErrInvalidSpec = errors.New("invalid service spec")
	// ErrNoResources: the driver had no room for the service (ENOSPC);
	// the *AllocError says which pool or resource ran out.
	ErrNoResources = errors.New("no resources for the service")
	// ErrBusy: the service is still in use (EBUSY) after the retries.
	ErrBusy = errors.New("service busy")
	// ErrNotFound: no service has that ID.
	ErrNotFound = errors.New("no such service")
	// ErrDefaultService: the default service cannot be destroyed.
	ErrDefaultService = errors.New("the default service cannot be destroyed")
	// ErrExists: the driver refused with EEXIST, because of another
	// service or member already there. Creating a service gets it when a
	// VNI of the spec lies in another service's VNI range (two services
	// may share an exact VNI, but a range may overlap nothing, the
	// default service's VNIs 1 and 10 included), or when the netns is
	// already admitted. The driver's EEXIST stays in the chain.
	ErrExists = errors.New("conflicts with an existing service")
)

// classify marks the driver errors that callers handle by kind with this
// package's sentinel, keeping the errno in the chain.
func classify(err error) error {
	if errors.Is(err, syscall.EEXIST) && !errors.Is(err, ErrExists) {
		return fmt.Errorf("%w: %w", ErrExists, err)
	}
	return err
}

// AllocError is the error of a SVC_ALLOC that failed with ENOSPC, with
// the driver's account of what was missing. It matches ErrNoResources and
// unwraps to the driver's error.
type AllocError struct {
	// Fail is the driver's cxi_svc_fail_info.
	Fail uapi.FailInfo
	// Err is the driver's error (wrapping ENOSPC).
	Err error
}

// Error describes the failure with the fail info.
func (e *AllocError) Error() string {
	return fmt.Sprintf("%s (%s): %v", ErrNoResources, e.Fail, e.Err)
}

// Unwrap returns the driver's error.
func (e *AllocError) Unwrap() error { return e.Err }

// Is reports whether target is ErrNoResources.
func (e *AllocError) Is(target error) bool { return target == ErrNoResources }

// ConflictError is the error of a Create the driver refused with EEXIST
// because a VNI of the spec lies in another service's VNI range. The
// agent's own services never cause it (they list exact VNIs, which
// services may share); a range another tool set on the NIC does. It
// matches ErrExists and unwraps to the driver's error.
type ConflictError struct {
	// VNIs are the spec's VNIs.
	VNIs []uint16
	// Conflicts are the services whose range holds one of VNIs, as listed
	// after the refusal; empty when the list could not be read or no
	// longer shows one.
	Conflicts []Service
	// ListErr is why the list could not be read, if it could not.
	ListErr error
	// Err is the driver's error (wrapping EEXIST).
	Err error
}

// Error names the conflicting services and their ranges.
func (e *ConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: VNIs %v", ErrExists, e.VNIs)
	switch {
	case len(e.Conflicts) > 0:
		parts := make([]string, 0, len(e.Conflicts))
		for _, s := range e.Conflicts {
			parts = append(parts, fmt.Sprintf("service %d (VNI range %s, %s)", s.ID, s.VNIRange, membersString(s)))
		}
		fmt.Fprintf(&b, " overlap the VNI range of %s", strings.Join(parts, ", "))
	case e.ListErr != nil:
		fmt.Fprintf(&b, " overlap another service's VNI range (which one is unknown: %v)", e.ListErr)
	default:
		b.WriteString(" overlap another service's VNI range (no longer listed)")
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

// Unwrap returns the driver's error.
func (e *ConflictError) Unwrap() error { return e.Err }

// Is reports whether target is ErrExists.
func (e *ConflictError) Is(target error) bool { return target == ErrExists }

// membersString describes who a service admits.
func membersString(s Service) string {
	if !s.RestrictedMembers {
		return "open to every process"
	}
	if len(s.Members) == 0 {
		return "no members"
	}
	parts := make([]string, 0, len(s.Members))
	for _, m := range s.Members {
		parts = append(parts, m.String())
	}
	return "members " + strings.Join(parts, " ")
}
