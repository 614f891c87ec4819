package cxi

import (
	"errors"
	"fmt"
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
