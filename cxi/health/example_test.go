package health_test

import (
	"context"
	"log/slog"

	"github.com/slingshot-k8s/slingshot/cxi/health"
)

// The agent builds targets from discovery, runs the monitor under its own
// context and turns events into device-plugin health updates.
func ExampleMonitor() {
	watch := func(ctx context.Context, log *slog.Logger, markUnhealthy func(nic string, unhealthy bool)) error {
		m := health.New(health.Config{
			Targets: []health.Target{{
				NIC:       "cxi0",
				NetDev:    "hsn0",
				DeviceDir: "/sys/class/cxi/cxi0/device",
				NetDir:    "/sys/class/net/hsn0",
			}},
			Logger: log,
		})
		errc := make(chan error, 1)
		go func() { errc <- m.Run(ctx) }()
		for ev := range m.Events() { // closed when Run returns
			markUnhealthy(ev.NIC, !ev.Healthy)
		}
		return <-errc
	}
	_ = watch
}
