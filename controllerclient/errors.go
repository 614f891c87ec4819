package controllerclient

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinels that the client's errors match with errors.Is.
var (
	// ErrUnavailable: the controller could not be reached or is loading,
	// after all retries.
	ErrUnavailable = errors.New("controller unavailable")
	// ErrExhausted: the VNI range or pool is full.
	ErrExhausted = errors.New("controller range exhausted")
	// ErrInvalidArgument: the controller refused a field.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: no such pod or claim, or slice not held.
	ErrNotFound = errors.New("not found")
	// ErrOwnerGone: the pod's job is being deleted.
	ErrOwnerGone = errors.New("owner is gone")
	// ErrDenied: the controller refused this agent's credentials.
	ErrDenied = errors.New("denied by controller")
	// ErrNoPodVNIPool: the controller has no pod VNI range configured.
	ErrNoPodVNIPool = errors.New("controller has no pod vni pool")
)

// Error is a controller error: its gRPC code, message and ErrorInfo
// reason. It matches the sentinel of its code.
type Error struct {
	Code    codes.Code
	Message string
	Reason  string
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s (%s): %s", e.Code, e.Reason, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is maps the code onto the package's sentinels.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return target == ErrUnavailable
	case codes.ResourceExhausted:
		return target == ErrExhausted
	case codes.InvalidArgument:
		return target == ErrInvalidArgument
	case codes.NotFound:
		return target == ErrNotFound
	case codes.FailedPrecondition:
		return target == ErrOwnerGone
	case codes.Unauthenticated, codes.PermissionDenied:
		return target == ErrDenied
	}
	return false
}

func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			e.Reason = ei.Reason
		}
	}
	return e
}

func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}
