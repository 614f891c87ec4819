package controllerclient

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/slingshot-k8s/slingshot/internal/version"
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
	// ErrSliceTaken: another node leases the slice asked for; the error
	// is a [*SliceTakenError] that says which.
	ErrSliceTaken = errors.New("slice leased to another node")
	// ErrReleaseRefused: the controller certainly did not release the
	// slice (it refused the request before acting), so the node still
	// holds it.
	ErrReleaseRefused = errors.New("slice release refused")
	// ErrUnsupported: the controller answered with what this agent does
	// not know, or does not serve the call, as a controller of another
	// release may: refused, never misread. The error is an
	// [*UnsupportedError], which names both releases.
	ErrUnsupported = errors.New("not supported across these releases")
)

// UnsupportedError is a call that this agent and the controller do not
// share: an answer the agent does not understand (a lease of a scope it
// does not know, a VNI out of range), or a method the controller does not
// serve (its gRPC code Unimplemented). The two are then of releases the
// version-skew policy does not pair (docs/upgrade.md), or one of them
// broke the policy's rule that the API changes only additively. It names
// both releases and matches ErrUnsupported.
type UnsupportedError struct {
	// Method is the call.
	Method string
	// What says what one side does not know, as a clause: "the controller
	// answered a lease of scope 7, which this agent does not know".
	What string
	// Agent is this agent's release; Controller the controller's, as its
	// answers said it (version.Unknown when they did not: a controller
	// before 0.3.0).
	Agent, Controller string
	// Err is the controller's own error (a method it does not serve), or
	// nil.
	Err error
}

func (e *UnsupportedError) Error() string {
	skew := ""
	if errors.Is(version.CheckSkew(e.Controller, e.Agent), version.ErrSkew) {
		skew = ", outside the version-skew policy"
	}
	msg := fmt.Sprintf("%s: %s (agent %s, controller %s%s; docs/upgrade.md)", e.Method, e.What, e.Agent, e.Controller, skew)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Unwrap returns the controller's error, if any.
func (e *UnsupportedError) Unwrap() error { return e.Err }

// Error is a controller error: its gRPC code, message and ErrorInfo
// reason and metadata. It matches the sentinel of its code.
type Error struct {
	Code     codes.Code
	Message  string
	Reason   string
	Metadata map[string]string
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
	case codes.AlreadyExists:
		return target == ErrSliceTaken
	}
	return false
}

// reasonSliceTaken is the controller's ErrorInfo reason for a slice that
// another node leases.
const reasonSliceTaken = "SLICE_TAKEN"

// SliceTakenError says which node leases the slice that this node asked
// for. It matches ErrSliceTaken and unwraps to the controller's *Error.
type SliceTakenError struct {
	Pool  string
	Index int
	// Prefix is the slice's prefix (invalid for a slice of VNIs).
	Prefix netip.Prefix
	// Node leases the slice.
	Node string
	Err  *Error
}

func (e *SliceTakenError) Error() string {
	return fmt.Sprintf("slice %d (%s) of pool %s is leased to node %s", e.Index, e.Err.Metadata["slice"], e.Pool, e.Node)
}

// Unwrap returns the controller's error.
func (e *SliceTakenError) Unwrap() error { return e.Err }

// sliceTaken reads a SLICE_TAKEN error's metadata; ok is false for any
// other error, or one whose metadata lacks the pool, index or node.
func sliceTaken(e *Error) (*SliceTakenError, bool) {
	if e.Code != codes.AlreadyExists || e.Reason != reasonSliceTaken {
		return nil, false
	}
	i, err := strconv.Atoi(e.Metadata["index"])
	if err != nil || i < 0 || e.Metadata["pool"] == "" || e.Metadata["node"] == "" {
		return nil, false
	}
	st := &SliceTakenError{Pool: e.Metadata["pool"], Index: i, Node: e.Metadata["node"], Err: e}
	if p, err := netip.ParsePrefix(e.Metadata["slice"]); err == nil {
		st.Prefix = p
	}
	return st, true
}

func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			e.Reason, e.Metadata = ei.Reason, ei.Metadata
		}
	}
	if taken, ok := sliceTaken(e); ok {
		return taken
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
