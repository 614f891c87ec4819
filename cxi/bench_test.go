package cxi

import (
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
)

// BenchmarkCreateDestroy creates and destroys a netns-member service
// through the real uapi encoding over the simulated driver, with its state
// in a temporary directory: SVC_ALLOC, SVC_ENABLE(0), SVC_SET_NETNS,
// SVC_ENABLE(1), SVC_GET, SVC_GET_NETNS, SVC_DESTROY per op.
func BenchmarkCreateDestroy(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts sim.Options
	}{
		{"fsync", sim.Options{}},
		{"nosync", sim.Options{NoSync: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, dev := newSim(b, b.TempDir(), bc.opts)
			c := NewClient(dev)
			spec := netnsSpec(1024)
			for b.Loop() {
				svc, err := c.Create(b.Context(), spec)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Destroy(b.Context(), svc.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkList lists 100 netns-member services (plus the default one):
// two SVC_LIST_GETs and one SVC_GET_NETNS per service.
func BenchmarkList(b *testing.B) {
	_, dev := newSim(b, b.TempDir(), sim.Options{NoSync: true})
	c := NewClient(dev)
	for i := range 100 {
		if _, err := c.Create(b.Context(), netnsSpecFor(uint16(1024+i), uint32(podNetns+i))); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		svcs, err := c.List(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if len(svcs) != 101 {
			b.Fatalf("%d services", len(svcs))
		}
	}
}
