package agent

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

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
