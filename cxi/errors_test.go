package cxi

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// TestConflictErrorMessage: the error of a refused Create says which
// services are in the way, or why it cannot, and matches ErrExists and
// the driver's EEXIST whichever it is.
func TestConflictErrorMessage(t *testing.T) {
	driver := fmt.Errorf("SVC_ALLOC: %w", unix.EEXIST)
	rng := Service{ID: 5, VNIRange: &VNIRange{Min: 1024, Max: 2047}, RestrictedMembers: true,
		Members: []Member{{MemberUID, 2000}, {MemberGID, 7}}}
	open := Service{ID: 6, VNIRange: &VNIRange{Min: 4096, Max: 4099}}
	tests := []struct {
		name string
		err  *ConflictError
		want string
	}{
		{"one service", &ConflictError{VNIs: []uint16{1500}, Conflicts: []Service{rng}, Err: driver},
			"conflicts with an existing service: VNIs [1500] overlap the VNI range of service 5 (VNI range 1024-2047, members uid=2000 gid=7): SVC_ALLOC: file exists"},
		{"two services", &ConflictError{VNIs: []uint16{1500, 4097}, Conflicts: []Service{rng, open}, Err: driver},
			"conflicts with an existing service: VNIs [1500 4097] overlap the VNI range of service 5 (VNI range 1024-2047, members uid=2000 gid=7), service 6 (VNI range 4096-4099, open to every process): SVC_ALLOC: file exists"},
		{"the list failed", &ConflictError{VNIs: []uint16{1500}, ListErr: errors.New("list services: EIO"), Err: driver},
			"conflicts with an existing service: VNIs [1500] overlap another service's VNI range (which one is unknown: list services: EIO): SVC_ALLOC: file exists"},
		{"gone since", &ConflictError{VNIs: []uint16{1500}, Err: driver},
			"conflicts with an existing service: VNIs [1500] overlap another service's VNI range (no longer listed): SVC_ALLOC: file exists"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("create service: %w", tc.err)
			if got := tc.err.Error(); got != tc.want {
				t.Fatalf("Error() =\n%s\nwant\n%s", got, tc.want)
			}
			if !errors.Is(err, ErrExists) || !errors.Is(err, unix.EEXIST) || errors.Is(err, ErrNoResources) {
				t.Fatalf("%v: want ErrExists and EEXIST only", err)
			}
		})
	}
}

func TestServiceBlocksVNI(t *testing.T) {
	rng := Service{VNIRange: &VNIRange{Min: 64, Max: 127}}
	exact := Service{RestrictedVNIs: true, VNIs: []uint16{64, 100}}
	tests := []struct {
		svc  Service
		vni  uint16
		want bool
	}{
		{rng, 64, true}, {rng, 127, true}, {rng, 100, true}, {rng, 63, false}, {rng, 128, false},
		// Exact VNIs may be shared: only a range blocks.
		{exact, 64, false}, {exact, 100, false},
		{Service{}, 1, false},
	}
	for _, tc := range tests {
		if got := tc.svc.BlocksVNI(tc.vni); got != tc.want {
			t.Errorf("%+v.BlocksVNI(%d) = %v, want %v", tc.svc, tc.vni, got, tc.want)
		}
	}
}
