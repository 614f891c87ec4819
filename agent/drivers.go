package agent

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// openDevice opens one NIC's CXI device: the real /dev/cxiN, or the
// simulated driver whose state lives in the agent's state directory. Both
// speak the real command encoding. The closer releases it.
func openDevice(kind, devRoot, stateDir string, n sysfs.NIC) (cxi.Device, io.Closer, error) {
	switch kind {
	case DriverUAPI:
		d, err := uapi.Open(filepath.Join(devRoot, n.Name))
		if err != nil {
			return nil, nil, fmt.Errorf("open %s: %w", n.Name, err)
		}
		return d, d, nil
	case DriverSim:
		opts := sim.Options{VF: n.VF, Max: sim.MaxFromSysfs(n.Properties.Max)}
		s, err := sim.Open(filepath.Join(stateDir, "cxi-sim"), n.Name, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("simulated %s: %w", n.Name, err)
		}
		d := uapi.NewDevice(s)
		return d, d, nil
	}
	return nil, nil, fmt.Errorf("unknown CXI driver %q", kind)
}

// countingDevice counts the EBUSY answers to SVC_DESTROY, which the
// service client retries.
type countingDevice struct {
	cxi.Device
	busy prometheus.Counter
}

func (d countingDevice) DestroyService(id uint32) error {
	err := d.Device.DestroyService(id)
	if errors.Is(err, unix.EBUSY) {
		d.busy.Inc()
	}
	return err
}

// nic is an opened NIC: its driver, which the engine alone binds through
// (nicSet), and which the default-service guard and the inspect view read.
type nic struct {
	name  string // "cxi0"
	index int
	drv   engine.Driver
}

// nicSet is the opened NICs as the engine reads them.
type nicSet map[string]*nic

func (s nicSet) Driver(name string) (engine.Driver, bool) {
	n, ok := s[name]
	if !ok {
		return nil, false
	}
	return n.drv, true
}

func (s nicSet) Names() []string { return slices.Sorted(maps.Keys(s)) }

// byIndex is the NICs in their index order.
func (s nicSet) byIndex() []*nic {
	out := slices.Collect(maps.Values(s))
	slices.SortFunc(out, func(x, y *nic) int { return x.index - y.index })
	return out
}
