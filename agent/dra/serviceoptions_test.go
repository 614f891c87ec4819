package dra

import (
	"errors"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/draclaim"
)

// TestParseConfigServiceOptions: a claim's serviceOptions are the pod
// annotation's grammar, checked by the same parser, errors naming the
// field under serviceOptions.
func TestParseConfigServiceOptions(t *testing.T) {
	const head = `"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig"`
	for _, tt := range []struct {
		name, raw, wantErr string
		wantTCs            []string
		wantDepth          int
	}{
		{name: "classes and depth", raw: `{` + head + `,"serviceOptions":{"trafficClasses":["low_latency","BULK_DATA"],"depth":8}}`,
			wantTCs: []string{"LOW_LATENCY", "BULK_DATA"}, wantDepth: 8},
		{name: "bad class", raw: `{` + head + `,"serviceOptions":{"trafficClasses":["FAST"]}}`, wantErr: `serviceOptions: invalid service options: trafficClasses[0]: unknown class "FAST"`},
		{name: "unknown option", raw: `{` + head + `,"serviceOptions":{"dpeth":8}}`, wantErr: `unknown field "dpeth"`},
		{name: "too many VNIs", raw: `{` + head + `,"serviceOptions":{"vnis":["a","b","c","d"]}}`, wantErr: "vnis: 4 names"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := draclaim.ParseConfig([]byte(tt.raw))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.ServiceOptions == nil {
				t.Fatalf("ParseConfig = %+v, %v", got, err)
			}
			if o := got.ServiceOptions; strings.Join(o.TrafficClasses, ",") != strings.Join(tt.wantTCs, ",") || o.Depth != tt.wantDepth {
				t.Fatalf("serviceOptions = %+v, want classes %v depth %d", *o, tt.wantTCs, tt.wantDepth)
			}
		})
	}
}

// TestConfigOfMergesServiceOptions: the claim's serviceOptions override
// its DeviceClass's field by field.
func TestConfigOfMergesServiceOptions(t *testing.T) {
	c := claim("c1", "train-0", `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","serviceOptions":{"depth":8}}`, "cxi0")
	cfgs := c.Status.Allocation.Devices.Config
	class := cfgs[0]
	class.Source = resourceapi.AllocationConfigSourceClass
	class.Opaque = class.Opaque.DeepCopy()
	class.Opaque.Parameters.Raw = []byte(`{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","serviceOptions":{"depth":2,"vnis":["storage"]}}`)
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{cfgs[0], class}
	got, err := draclaim.ConfigOf(c, testDriver)
	if err != nil || got.ServiceOptions == nil || got.ServiceOptions.Depth != 8 || len(got.ServiceOptions.VNIs) != 1 {
		t.Fatalf("configOf = %+v, %v; want depth 8 (the claim's) and vnis [storage] (the class's)", got.ServiceOptions, err)
	}
}

func jobsPolicy(t *testing.T) *jobpolicy.Policy {
	t.Helper()
	c, err := config.Parse([]byte(`
jobOptions:
  trafficClasses: {namespaces: {ns: [BULK_DATA]}}
  extraVNIs: [{name: storage, vni: 900, namespaces: [ns]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	return jobpolicy.New(c)
}

// TestPrepareServiceOptions: a claim's serviceOptions reach its services
// (classes, reservations times depth, the named VNI after the job's) and
// its environment, in the order Slurm gives SLINGSHOT_VNIS.
func TestPrepareServiceOptions(t *testing.T) {
	ctx := t.Context()
	r := newRig(t)
	jobs := jobsPolicy(t)
	r.cfg.Jobs = func() *jobpolicy.Policy { return jobs }
	r.defaults.Adjust = true
	r.restart()
	c := claim("c1", "train-0", `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","serviceOptions":{"trafficClasses":["LOW_LATENCY","BULK_DATA"],"depth":4,"vnis":["storage"]}}`, "cxi0")
	if _, err := r.m.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	svcs := r.services("cxi0")
	if len(svcs) != 1 {
		t.Fatalf("services = %+v, want one", svcs)
	}
	d := svcs[0].Desc
	if !slices.Equal(d.ValidVNIs(), []uint16{2000, 900}) {
		t.Fatalf("VNIs = %v, want [2000 900]", d.ValidVNIs())
	}
	if !d.TCs[uapi.TCLowLatency] || !d.TCs[uapi.TCBulkData] || d.TCs[uapi.TCBestEffort] || d.TCs[uapi.TCDedicatedAccess] {
		t.Fatalf("TCs = %v, want LOW_LATENCY and BULK_DATA", d.TCs)
	}
	if got := d.Limits[uapi.RsrcLE].Res; got != 16*4 {
		t.Fatalf("LEs reserved = %d, want 4 times 16", got)
	}
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531900)); err != nil {
		t.Fatal(err)
	}
	env, err := r.m.Check(ctx, sandbox("train-0", 4026531900), nil)
	if err != nil || !slices.Contains(env, "SLINGSHOT_VNIS=2000,900") || !slices.Contains(env, "SLINGSHOT_TCS=0x6") {
		t.Fatalf("env = %v, %v; want the job's VNI then the storage VNI, and classes 0x6", env, err)
	}
	if err := r.m.Unprepare(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	r.checkEmpty()
}

// TestPrepareServiceOptionsRefused: a claim asking for more than its
// namespace may is refused at Prepare, naming the field, holding nothing.
func TestPrepareServiceOptionsRefused(t *testing.T) {
	r := newRig(t)
	jobs := jobsPolicy(t)
	r.cfg.Jobs = func() *jobpolicy.Policy { return jobs }
	r.restart()
	c := claim("c1", "train-0", `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","serviceOptions":{"trafficClasses":["DEDICATED_ACCESS"]}}`, "cxi0")
	_, err := r.m.Prepare(t.Context(), c)
	if !errors.Is(err, jobpolicy.ErrRefused) || !strings.Contains(err.Error(), "serviceOptions") || !strings.Contains(err.Error(), "trafficClasses[0]: DEDICATED_ACCESS is not allowed") {
		t.Fatalf("Prepare = %v, want refused naming serviceOptions trafficClasses[0]", err)
	}
	r.checkEmpty()
}
