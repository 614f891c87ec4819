package ipam_test

import (
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/ipam/ipamtest"
)

// A pool's lost-slice counter is exported at 0 from the moment the node
// learns of the pool (from the controller, or from its state after a
// restart): a counter that only appears at its first increment hides that
// increment from rate() and increase(), and the chart's alert on lost
// slices would miss a node's first lost slice.
func TestLostSlicesCounterStartsAtZeroPerPool(t *testing.T) {
	dir := t.TempDir()
	ctl := ipamtest.NewController(hsn0, small)
	for _, tt := range []struct {
		name   string
		upkeep bool // list the controller's pools
		want   int  // lost-slice series
	}{
		{"before the controller names its pools", false, 0},
		{"after the pools are listed", true, 2},
		{"restarted from the state file", false, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			a, err := ipam.New(ipam.Options{StatePath: filepath.Join(dir, "n1.json"), Slicer: ctl.Node("n1"), Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			if tt.upkeep {
				ipam.Upkeep(a, t.Context())
			}
			n, err := testutil.GatherAndCount(reg, "slingshot_agent_ipam_lost_slices_total")
			if err != nil {
				t.Fatal(err)
			}
			if n != tt.want {
				t.Fatalf("%d lost-slice series, want %d", n, tt.want)
			}
		})
	}
}
