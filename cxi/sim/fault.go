package sim

import (
	"fmt"
	"slices"
	"syscall"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// Fault makes the simulated NIC refuse a command the way the real driver
// can, at a moment a test chooses: the next Count times (every time when
// Count is negative) that Op would change a service, it fails with Errno
// and changes nothing. It lives in the NIC's state file, so it reaches the
// driver's users in every process (a real node's agent, say) until it is
// spent or cleared.
//
// It stands in for conditions the simulation cannot produce on demand
// between two of a client's commands, such as another user taking the
// last RMU VNI-list entry between a prepare and a bind (ENOSPC at
// enable). Only errors the real driver returns for Op are accepted
// (faultErrnos); a fault on SVC_ENABLE fires only when enabling.
type Fault struct {
	Op    uapi.Op       `json:"op"`
	Errno syscall.Errno `json:"errno"`
	Count int           `json:"count"`
}

// faultErrnos are the errors the real driver gives for each command a
// fault may target (cass_svc.c and cxi_user_core.c): what a client must
// already handle, so a test cannot make the simulation say what the
// driver never would.
var faultErrnos = map[uapi.Op][]syscall.Errno{
	uapi.OpSvcAlloc:    {syscall.ENOSPC, syscall.ENOMEM, syscall.EINVAL},
	uapi.OpSvcEnable:   {syscall.ENOSPC, syscall.EBUSY},
	uapi.OpSvcSetNetns: {syscall.ENOMEM, syscall.EBUSY},
	uapi.OpSvcDestroy:  {syscall.EBUSY},
}

func (f Fault) validate() error {
	allowed, ok := faultErrnos[f.Op]
	if !ok {
		return fmt.Errorf("no fault can be injected into %s", f.Op)
	}
	if !slices.Contains(allowed, f.Errno) {
		return fmt.Errorf("the driver does not return %v (errno %d) from %s", f.Errno, int(f.Errno), f.Op)
	}
	if f.Count == 0 {
		return fmt.Errorf("fault on %s never fires: count 0", f.Op)
	}
	return nil
}

// InjectFault adds f to the NIC's faults; it fires before any fault added
// later on the same command.
func (d *Device) InjectFault(f Fault) error {
	if err := f.validate(); err != nil {
		return fmt.Errorf("inject fault into %s: %w", d.name, err)
	}
	return d.update(func(st *state) (bool, syscall.Errno) {
		st.Faults = append(st.Faults, f)
		return true, 0
	})
}

// ClearFaults removes every fault that has not fired its last time.
func (d *Device) ClearFaults() error {
	return d.update(func(st *state) (bool, syscall.Errno) {
		changed := len(st.Faults) > 0
		st.Faults = nil
		return changed, 0
	})
}

// fire reports the errno of the first fault on op, spending one of its
// firings; 0 when none applies.
func (st *state) fire(op uapi.Op) syscall.Errno {
	for i := range st.Faults {
		f := &st.Faults[i]
		if f.Op != op {
			continue
		}
		errno := f.Errno
		if f.Count > 0 {
			f.Count--
			if f.Count == 0 {
				st.Faults = slices.Delete(st.Faults, i, i+1)
			}
		}
		return errno
	}
	return 0
}
