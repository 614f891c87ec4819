package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// InjectFault makes the node's simulated NIC nic refuse a command (see
// sim.Fault) for the agent and every other user of the NIC, until the
// fault is spent or the returned clear is called. The state is the one
// the agent's driver uses: the fault reaches it on its next command.
func (e *Env) InjectFault(nic string, f sim.Fault) (clear func() error, err error) {
	dev, err := sim.Open(e.SimStateDir, nic, sim.Options{})
	if err != nil {
		return nil, fmt.Errorf("open simulated %s: %w", nic, err)
	}
	if err := dev.InjectFault(f); err != nil {
		_ = dev.Close()
		return nil, err
	}
	return func() error {
		defer dev.Close()
		if err := dev.ClearFaults(); err != nil {
			return fmt.Errorf("clear faults of simulated %s: %w", nic, err)
		}
		return nil
	}, nil
}

// faultCounts reads how many firings each fault on op of the simulated
// NIC nic has left, from its state file, as the driver keeps them (a
// fault fired its last time is gone).
func (e *Env) faultCounts(nic string, op uapi.Op) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(e.SimStateDir, nic+".json"))
	if err != nil {
		return nil, err
	}
	var st struct {
		Faults []sim.Fault `json:"faults"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("simulated %s: %w", nic, err)
	}
	var out []int
	for _, f := range st.Faults {
		if f.Op == op {
			out = append(out, f.Count)
		}
	}
	return out, nil
}

// TimedFault is a fault on some simulated NICs that lasts a given time
// from its first firing on any of them (FaultFor).
type TimedFault struct {
	cancel context.CancelFunc
	done   chan struct{}
	// Set by the goroutine before done closes.
	first, cleared time.Time
	fired          int
	err            error
}

// timedFaultFirings is the fault's count on each NIC: more than any test
// spends in its time, so that what it has left tells how often it fired.
const timedFaultFirings = 1 << 20

// FaultFor makes the simulated NICs nics refuse f.Op with f.Errno (f.Count
// is ignored) from now on, and lifts the fault d after it first fires on
// any of them: "the driver answers EBUSY for 5 s", seen from the moment
// the agent first meets it. A goroutine watches the NICs' state every 20
// ms; it ends when it has lifted the fault, or when ctx ends or Wait
// returns (the fault lifted then too).
func (e *Env) FaultFor(ctx context.Context, nics []string, f sim.Fault, d time.Duration) (*TimedFault, error) {
	f.Count = timedFaultFirings
	var clears []func() error
	clearAll := func() error {
		var errs []error
		for _, c := range clears {
			errs = append(errs, c())
		}
		return errors.Join(errs...)
	}
	for _, nic := range nics {
		c, err := e.InjectFault(nic, f)
		if err != nil {
			return nil, errors.Join(err, clearAll())
		}
		clears = append(clears, c)
	}
	ctx, cancel := context.WithCancel(ctx)
	tf := &TimedFault{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tf.done)
		defer func() {
			tf.fired = e.firings(nics, f.Op)
			if err := clearAll(); err != nil {
				tf.err = errors.Join(tf.err, err)
			}
			tf.cleared = time.Now()
		}()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		lift := time.NewTimer(d)
		lift.Stop()
		defer lift.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-lift.C:
				return
			case <-tick.C:
			}
			if tf.first.IsZero() && e.firings(nics, f.Op) > 0 {
				tf.first = time.Now()
				lift.Reset(d)
			}
		}
	}()
	return tf, nil
}

// firings counts how often the timed faults on op of nics have fired; a
// state that cannot be read counts none.
func (e *Env) firings(nics []string, op uapi.Op) int {
	n := 0
	for _, nic := range nics {
		counts, err := e.faultCounts(nic, op)
		if err != nil {
			continue
		}
		for _, c := range counts {
			n += timedFaultFirings - c
		}
	}
	return n
}

// Wait ends the fault (lifted at once, if it has not been yet) and
// returns when it first fired (zero if never), when it was lifted and
// how often it fired.
func (tf *TimedFault) Wait() (first, cleared time.Time, fired int, err error) {
	tf.cancel()
	<-tf.done
	return tf.first, tf.cleared, tf.fired, tf.err
}

// Lifted is closed once the fault is lifted.
func (tf *TimedFault) Lifted() <-chan struct{} { return tf.done }

// ReloadDriver stands for a reload of the CXI driver on every NIC of the
// node: every service goes but the default one, which the driver makes
// at load, and those in use (the Ethernet service, which cxi_eth makes
// again at once). Each is destroyed through the driver's own command.
// It returns the IDs destroyed, by NIC.
func (e *Env) ReloadDriver() (map[string][]uint32, error) {
	gone := map[string][]uint32{}
	for _, nic := range e.Machine.NICs {
		if nic.VF {
			continue
		}
		dev, err := sim.Open(e.SimStateDir, nic.Name, sim.Options{})
		if err != nil {
			return gone, fmt.Errorf("open simulated %s: %w", nic.Name, err)
		}
		svcs, err := dev.Services()
		if err != nil {
			dev.Close()
			return gone, err
		}
		d := uapi.NewDevice(dev)
		for _, s := range svcs {
			if s.Desc.SvcID == uapi.DefaultSvcID || s.LNIs > 0 {
				continue
			}
			if err := d.DestroyService(s.Desc.SvcID); err != nil {
				dev.Close()
				return gone, fmt.Errorf("driver reload: %s service %d: %w", nic.Name, s.Desc.SvcID, err)
			}
			gone[nic.Name] = append(gone[nic.Name], s.Desc.SvcID)
		}
		if err := dev.Close(); err != nil {
			return gone, err
		}
	}
	return gone, nil
}

// DestroyService destroys service id of the node's simulated NIC nic
// through the driver's own command, behind the agent's back: what an
// admin's cxi_service delete, or a driver reload, does to one service.
func (e *Env) DestroyService(nic string, id uint32) error {
	dev, err := sim.Open(e.SimStateDir, nic, sim.Options{})
	if err != nil {
		return fmt.Errorf("open simulated %s: %w", nic, err)
	}
	if err := uapi.NewDevice(dev).DestroyService(id); err != nil {
		dev.Close()
		return fmt.Errorf("destroy service %d of %s: %w", id, nic, err)
	}
	return dev.Close()
}
