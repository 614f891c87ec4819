package jobreq

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/slingshot-k8s/slingshot/cxi"
)

func ptr(v int) *int { return &v }

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Request
		wantErr string
	}{
		{name: "empty object asks nothing", in: `{}`, want: Request{}},
		{name: "all fields", in: `{"trafficClasses":["LOW_LATENCY","BULK_DATA"],"depth":8,"resources":{"TLEs":{"res":16}},"vnis":["storage"]}`,
			want: Request{TrafficClasses: []string{"LOW_LATENCY", "BULK_DATA"}, Depth: 8,
				Resources: map[string]Resource{"TLEs": {Res: ptr(16)}}, VNIs: []string{"storage"}}},
		{name: "class spellings as Slurm takes them", in: `{"trafficClasses":["tc_low_latency","Best_Effort"]}`,
			want: Request{TrafficClasses: []string{"LOW_LATENCY", "BEST_EFFORT"}}},
		{name: "resource names in any case", in: `{"resources":{"txqs":{"def":4,"max":64}}}`,
			want: Request{Resources: map[string]Resource{"TXQs": {Def: ptr(4), Max: ptr(64)}}}},
		{name: "three extra VNIs", in: `{"vnis":["a","b","c"]}`, want: Request{VNIs: []string{"a", "b", "c"}}},
		{name: "unknown field", in: `{"trafficclass":["LOW_LATENCY"]}`, wantErr: `unknown field "trafficclass"`},
		{name: "not json", in: `depth=8`, wantErr: "want a JSON object"},
		{name: "trailing", in: `{} {}`, wantErr: "trailing data"},
		{name: "unknown class", in: `{"trafficClasses":["LOW_LATENCY","ETH"]}`, wantErr: `trafficClasses[1]: unknown class "ETH"`},
		{name: "class twice", in: `{"trafficClasses":["LOW_LATENCY","tc_low_latency"]}`, wantErr: "trafficClasses[1]: LOW_LATENCY listed twice"},
		{name: "negative depth", in: `{"depth":-1}`, wantErr: "depth: -1 is outside"},
		{name: "depth over 16 bits", in: `{"depth":65536}`, wantErr: "depth: 65536 is outside"},
		{name: "depth not a number", in: `{"depth":"8"}`, wantErr: "want a JSON object"},
		{name: "unknown resource", in: `{"resources":{"QPs":{"res":1}}}`, wantErr: `resources: unknown resource "QPs"`},
		{name: "resource twice", in: `{"resources":{"TLEs":{"res":8},"tles":{"res":9}}}`, wantErr: "resources: TLEs given twice"},
		{name: "res over max", in: `{"resources":{"LEs":{"res":20,"max":10}}}`, wantErr: "resources.LEs: res 20 exceeds max 10"},
		{name: "res over 16 bits", in: `{"resources":{"LEs":{"res":70000}}}`, wantErr: "resources.LEs.res: 70000 is outside 0..65535"},
		{name: "negative def", in: `{"resources":{"EQs":{"def":-2}}}`, wantErr: "resources.EQs.def: -2"},
		{name: "unknown resource field", in: `{"resources":{"EQs":{"min":2}}}`, wantErr: `unknown field "min"`},
		{name: "four extra VNIs", in: `{"vnis":["a","b","c","d"]}`, wantErr: "vnis: 4 names, but a service carries at most 3"},
		{name: "bad VNI name", in: `{"vnis":["Storage"]}`, wantErr: `vnis[0]: "Storage" is not a VNI name`},
		{name: "VNI named twice", in: `{"vnis":["daos","daos"]}`, wantErr: `vnis[1]: "daos" listed twice`},
		{name: "too long", in: `{"vnis":["` + strings.Repeat("a", MaxLen) + `"]}`, wantErr: "more than 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) = %v, want an ErrInvalid containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("Parse(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestTCs(t *testing.T) {
	tests := []struct {
		in   []string
		want cxi.TrafficClasses
	}{
		{nil, 0},
		{[]string{"LOW_LATENCY", "BULK_DATA"}, cxi.TCLowLatency | cxi.TCBulkData},
		{[]string{"DEDICATED_ACCESS", "LOW_LATENCY", "BULK_DATA", "BEST_EFFORT"}, cxi.AllTrafficClasses},
	}
	for _, tt := range tests {
		if got := (Request{TrafficClasses: tt.in}).TCs(); got != tt.want {
			t.Errorf("TCs(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestMerge(t *testing.T) {
	class := Request{TrafficClasses: []string{"LOW_LATENCY"}, Depth: 4,
		Resources: map[string]Resource{"LEs": {Def: ptr(32), Max: ptr(4096)}}}
	claim := Request{Depth: 8, Resources: map[string]Resource{"LEs": {Max: ptr(1024)}, "TLEs": {Res: ptr(8)}}, VNIs: []string{"storage"}}
	want := Request{TrafficClasses: []string{"LOW_LATENCY"}, Depth: 8,
		Resources: map[string]Resource{"LEs": {Def: ptr(32), Max: ptr(1024)}, "TLEs": {Res: ptr(8)}}, VNIs: []string{"storage"}}
	if diff := cmp.Diff(want, Merge(class, claim)); diff != "" {
		t.Fatalf("Merge (-want +got):\n%s", diff)
	}
	if got := class.Resources["LEs"].Max; *got != 4096 {
		t.Fatalf("Merge changed its base: LEs max %d", *got)
	}
	if diff := cmp.Diff(class, Merge(class, Request{})); diff != "" {
		t.Fatalf("Merge with nothing changed the base (-want +got):\n%s", diff)
	}
}

// FuzzParse: any input gives a request or an ErrInvalid, never a panic; a
// request parsed is canonical (parsing it again after a round trip gives
// the same) and within the grammar's bounds.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"trafficClasses":["LOW_LATENCY","BULK_DATA"],"depth":8,"resources":{"TLEs":{"res":16}},"vnis":["storage"]}`,
		`{"resources":{"txqs":{"def":4,"max":64},"LEs":{"res":1}}}`,
		`{"trafficClasses":["tc_best_effort"]}`,
		`{"depth":1e3}`, `[`, `{"vnis":["a","b","c","d"]}`, `null`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q): error %v does not match ErrInvalid", s, err)
			}
			return
		}
		if r.Depth < 0 || r.Depth > MaxDepth || len(r.VNIs) > MaxExtraVNIs {
			t.Fatalf("Parse(%q) = %+v: outside the grammar's bounds", s, r)
		}
		if r.TCs()&^cxi.AllTrafficClasses != 0 || (len(r.TrafficClasses) > 0) != (r.TCs() != 0) {
			t.Fatalf("Parse(%q): classes %v give the set %s", s, r.TrafficClasses, r.TCs())
		}
		again := r
		if err := again.Canonicalize(); err != nil {
			t.Fatalf("Parse(%q) = %+v, which is not canonical: %v", s, r, err)
		}
		if diff := cmp.Diff(r, again); diff != "" {
			t.Fatalf("Parse(%q): canonicalizing again changed it (-first +again):\n%s", s, diff)
		}
	})
}
