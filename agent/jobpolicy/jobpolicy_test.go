package jobpolicy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

func testPolicy(t *testing.T) *Policy {
	t.Helper()
	c, err := config.Parse([]byte(`
jobOptions:
  trafficClasses:
    everyone: [LOW_LATENCY, BEST_EFFORT]
    namespaces:
      hpc: [BULK_DATA, DEDICATED_ACCESS]
  maxDepth: 64
  resources:
    LEs: {def: 16, max: 4096}
  extraVNIs:
  - {name: storage, vni: 900, namespaces: [hpc]}
  - {name: scratch, vni: 901, namespaces: ["*"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	return New(c)
}

func parse(t *testing.T, s string) jobreq.Request {
	t.Helper()
	r, err := jobreq.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// slurm are the limits Slurm's defaults give depth d, with the LE policy
// above (def 16, max 4096) and TLEs reserving none.
func slurm(d uint16) map[string]checkpoint.Limit {
	return map[string]checkpoint.Limit{
		"TXQs": {Max: 1024, Res: 2 * d}, "TGQs": {Max: 512, Res: d}, "EQs": {Max: 2047, Res: 2 * d},
		"CTs": {Max: 2047, Res: d}, "TLEs": {}, "PTEs": {Max: 2048, Res: 6 * d},
		"LEs": {Max: 4096, Res: 16 * d}, "ACs": {Max: 1022, Res: 2 * d},
	}
}

func TestResolve(t *testing.T) {
	p := testPolicy(t)
	def := uint8(cxi.DefaultTrafficClasses)
	withTLEs := func(m map[string]checkpoint.Limit, l checkpoint.Limit) map[string]checkpoint.Limit {
		m["TLEs"] = l
		return m
	}
	tests := []struct {
		name, ns, req string
		want          *Options
		wantErr       string
	}{
		{name: "nothing asked: the node's defaults", ns: "a", req: `{}`, want: nil},
		{name: "allowed classes", ns: "a", req: `{"trafficClasses":["LOW_LATENCY"]}`, want: &Options{TCs: uint8(cxi.TCLowLatency)}},
		{name: "BULK_DATA where granted", ns: "hpc", req: `{"trafficClasses":["LOW_LATENCY","BULK_DATA"]}`,
			want: &Options{TCs: uint8(cxi.TCLowLatency | cxi.TCBulkData)}},
		{name: "BULK_DATA elsewhere", ns: "a", req: `{"trafficClasses":["LOW_LATENCY","BULK_DATA"]}`,
			wantErr: "namespace a: trafficClasses[1]: BULK_DATA is not allowed (the namespace may use LOW_LATENCY, BEST_EFFORT"},
		{name: "depth 1", ns: "a", req: `{"depth":1}`, want: &Options{TCs: def, Depth: 1, Limits: slurm(1)}},
		{name: "depth 8 reserves 8 times", ns: "a", req: `{"depth":8}`, want: &Options{TCs: def, Depth: 8, Limits: slurm(8)}},
		{name: "depth capped at the maximum", ns: "a", req: `{"depth":64,"resources":{"LEs":{"max":512}}}`,
			want: &Options{TCs: def, Depth: 64, Limits: func() map[string]checkpoint.Limit {
				m := slurm(64)
				m["LEs"] = checkpoint.Limit{Max: 512, Res: 512}
				m["TXQs"] = checkpoint.Limit{Max: 1024, Res: 128}
				return m
			}()}},
		{name: "depth too deep", ns: "a", req: `{"depth":65}`, wantErr: "depth: 65 is above the most allowed, 64 (jobOptions.maxDepth)"},
		{name: "TLEs reserved are at least 8 and max is res", ns: "a", req: `{"resources":{"TLEs":{"res":2}}}`,
			want: &Options{TCs: def, Depth: 1, Limits: withTLEs(slurm(1), checkpoint.Limit{Max: 8, Res: 8})}},
		{name: "TLE def times depth", ns: "a", req: `{"depth":8,"resources":{"TLEs":{"def":2}}}`,
			want: &Options{TCs: def, Depth: 8, Limits: withTLEs(slurm(8), checkpoint.Limit{Max: 16, Res: 16})}},
		{name: "res above the admin's max", ns: "a", req: `{"resources":{"LEs":{"res":5000}}}`,
			wantErr: "resources.LEs.res: 5000 is above the most allowed, 4096 (jobOptions.resources.LEs.max)"},
		{name: "max above the admin's max", ns: "a", req: `{"resources":{"TXQs":{"max":2000}}}`, wantErr: "resources.TXQs.max: 2000"},
		{name: "storage VNI where allowed", ns: "hpc", req: `{"vnis":["storage","scratch"]}`,
			want: &Options{TCs: def, ExtraVNIs: []checkpoint.NamedVNI{{Name: "storage", VNI: 900}, {Name: "scratch", VNI: 901}}}},
		{name: "storage VNI elsewhere", ns: "a", req: `{"vnis":["storage"]}`, wantErr: `vnis[0]: the namespace may not join VNI "storage"`},
		{name: "unknown VNI name", ns: "hpc", req: `{"vnis":["daos"]}`, wantErr: `vnis[0]: no VNI is named "daos"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.Resolve(tt.ns, parse(t, tt.req))
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve = %+v, %v; want an ErrRefused containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("Resolve (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDefaultPolicyKeepsTodaysBehaviour: with a configuration that says
// nothing, a pod that asks nothing gets no options (the node's classes and
// limits), and the default classes are all a namespace may ask for.
func TestDefaultPolicyKeepsTodaysBehaviour(t *testing.T) {
	p := New(config.Default())
	if o, err := p.Resolve("any", jobreq.Request{}); o != nil || err != nil {
		t.Fatalf("Resolve(nothing) = %+v, %v; want nil, nil", o, err)
	}
	if got := p.Allowed("any"); got != cxi.DefaultTrafficClasses {
		t.Fatalf("Allowed = %s, want %s", got, cxi.DefaultTrafficClasses)
	}
	if _, err := p.Resolve("any", jobreq.Request{TrafficClasses: []string{"DEDICATED_ACCESS"}}); !errors.Is(err, ErrRefused) {
		t.Fatalf("DEDICATED_ACCESS by default: %v, want refused", err)
	}
}
