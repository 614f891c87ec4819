package ipam

import (
	"errors"
	"fmt"
)

// Errors of the allocator; the socket's answers map each to a CNI code.
var (
	// ErrInvalidRequest: the request contradicts the pools (an address
	// outside the pool, a pool or subnet that does not exist).
	ErrInvalidRequest = errors.New("invalid address request")
	// ErrPoolFull: no free address, and no slice left to lease.
	ErrPoolFull = errors.New("ip pool full")
	// ErrAddressTaken: the fixed address asked for is in use.
	ErrAddressTaken = errors.New("address taken")
	// ErrUnavailable: the pools are not known yet, or the state could not
	// be written; try again later.
	ErrUnavailable = errors.New("ipam unavailable")
	// ErrReleaseRefused is what a Slicer's Release wraps when the
	// controller certainly kept the slice.
	ErrReleaseRefused = errors.New("slice release refused")
)

// SliceTakenError is what a Slicer's AcquireAt returns when another node
// holds the slice.
type SliceTakenError struct {
	Pool  string
	Index int
	Node  string
}

func (e *SliceTakenError) Error() string {
	return fmt.Sprintf("slice %d of pool %s is leased to node %s", e.Index, e.Pool, e.Node)
}
