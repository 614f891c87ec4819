package engine

import (
	"errors"
	"slices"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/cxi"
)

func TestServiceSpec(t *testing.T) {
	nodeLimits := cxi.DefaultLimits()
	d := Defaults{TCs: cxi.DefaultTrafficClasses, Limits: &nodeLimits, Adjust: true}
	t.Run("no options: the node's, as before", func(t *testing.T) {
		spec, err := ServiceSpec(2000, nil, d)
		if err != nil || !slices.Equal(spec.VNIs, []uint16{2000}) || spec.TCs != d.TCs || spec.Limits != d.Limits || spec.Fit != nil {
			t.Fatalf("ServiceSpec = %+v, %v", spec, err)
		}
	})
	t.Run("classes and named VNIs, job VNI first", func(t *testing.T) {
		o := &checkpoint.ServiceOptions{TCs: uint8(cxi.TCLowLatency | cxi.TCBulkData),
			ExtraVNIs: []checkpoint.NamedVNI{{Name: "storage", VNI: 900}, {Name: "scratch", VNI: 901}}}
		spec, err := ServiceSpec(2000, o, d)
		if err != nil || !slices.Equal(spec.VNIs, []uint16{2000, 900, 901}) || spec.TCs != cxi.TCLowLatency|cxi.TCBulkData || spec.Fit != nil {
			t.Fatalf("ServiceSpec = %+v, %v", spec, err)
		}
		if got := Extra(o); !slices.Equal(got, []uint16{900, 901}) {
			t.Fatalf("Extra = %v", got)
		}
	})
	t.Run("reservations are fitted", func(t *testing.T) {
		o := &checkpoint.ServiceOptions{TCs: uint8(cxi.DefaultTrafficClasses), Depth: 8,
			Limits: map[string]checkpoint.Limit{"LEs": {Max: 4096, Res: 128}, "TLEs": {Max: 8, Res: 8}}}
		spec, err := ServiceSpec(2000, o, d)
		if err != nil || spec.Fit == nil || !spec.Fit.AdjustLimits {
			t.Fatalf("ServiceSpec = %+v, %v; want fitted with adjust", spec, err)
		}
		want := cxi.DefaultLimits()
		want.LEs = cxi.Limit{Max: 4096, Res: 128}
		want.TLEs = cxi.Limit{Max: 8, Res: 8}
		if *spec.Limits != want {
			t.Fatalf("Limits = %+v, want %+v", *spec.Limits, want)
		}
	})
	t.Run("a job VNI that is a named one is refused", func(t *testing.T) {
		o := &checkpoint.ServiceOptions{ExtraVNIs: []checkpoint.NamedVNI{{Name: "storage", VNI: 2000}}}
		if _, err := ServiceSpec(2000, o, d); !errors.Is(err, ErrNamedVNIIsJobs) {
			t.Fatalf("ServiceSpec = %v, want ErrNamedVNIIsJobs", err)
		}
	})
}

func TestEnvVNIs(t *testing.T) {
	tests := []struct {
		name string
		b    Binding
		want string
	}{
		{"job VNI alone", Binding{NICs: []string{"cxi0"}, Services: []uint32{5}, VNI: 2000}, "SLINGSHOT_VNIS=2000"},
		{"named VNIs after the job's", Binding{NICs: []string{"cxi0"}, Services: []uint32{5}, VNI: 2000, Extra: []uint16{900, 901}}, "SLINGSHOT_VNIS=2000,900,901"},
		{"no VNI, no extras", Binding{NICs: []string{"cxi0"}, Extra: []uint16{900}}, "SLINGSHOT_VNIS="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if env := Env(tt.b); !slices.Contains(env, tt.want) {
				t.Fatalf("Env = %v, want %s among it", env, tt.want)
			}
		})
	}
}

func TestCarriesAll(t *testing.T) {
	if !CarriesAll([]uint16{2000, 900}, []uint16{2000}) || CarriesAll([]uint16{2000}, []uint16{2000, 900}) {
		t.Fatal("CarriesAll")
	}
}
