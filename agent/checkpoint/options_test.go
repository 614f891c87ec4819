package checkpoint

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func storage(vni uint16) *ServiceOptions {
	return &ServiceOptions{ExtraVNIs: []NamedVNI{{Name: "storage", VNI: vni}}}
}

// TestNamedVNIRules: the rule "no VNI held by two jobs" covers every VNI
// a service carries. A named VNI is shared by design, by any number of
// holders, but it is never a holder's own (leased) VNI, and a service
// carries no VNI that is neither.
func TestNamedVNIRules(t *testing.T) {
	tests := []struct {
		name    string
		before  []Holder
		put     Holder
		wantErr string
	}{
		{name: "two jobs share the named VNI",
			before: []Holder{{Kind: KindPod, Namespace: "ns", Name: "a", VNI: 2000, Options: storage(900), Services: []Service{{NIC: "cxi0", ID: 5, VNIs: []uint16{2000, 900}}}}},
			put:    Holder{Kind: KindPod, Namespace: "ns", Name: "b", VNI: 2001, Options: storage(900), Services: []Service{{NIC: "cxi0", ID: 6, VNIs: []uint16{2001, 900}}}}},
		{name: "a VNI neither own nor named",
			put:     Holder{Kind: KindPod, Namespace: "ns", Name: "b", VNI: 2001, Services: []Service{{NIC: "cxi0", ID: 6, VNIs: []uint16{2001, 900}}}},
			wantErr: "carries VNI 900, neither its VNI 2001 nor one it joined by name"},
		{name: "own VNI is another's named VNI",
			before:  []Holder{{Kind: KindPod, Namespace: "ns", Name: "a", VNI: 2000, Options: storage(900)}},
			put:     Holder{Kind: KindPod, Namespace: "ns", Name: "b", VNI: 900},
			wantErr: "pod ns/b's own VNI 900 is a named VNI pod ns/a joins"},
		{name: "named VNI is another's own",
			before:  []Holder{{Kind: KindPod, Namespace: "ns", Name: "a", VNI: 900}},
			put:     Holder{Kind: KindPod, Namespace: "ns", Name: "b", VNI: 2001, Options: storage(900)},
			wantErr: "pod ns/b joins by name VNI 900, the own VNI of pod ns/a"},
		{name: "own VNI is its own named VNI",
			put:     Holder{Kind: KindPod, Namespace: "ns", Name: "b", VNI: 900, Options: storage(900)},
			wantErr: "own VNI 900 is a named VNI"},
		{name: "a claim's own VNI",
			before:  []Holder{{Kind: KindClaim, UID: "c1", Namespace: "ns", Name: "c", VNI: 900}},
			put:     Holder{Kind: KindPod, Namespace: "ns", Name: "b", VNI: 2001, Options: storage(900)},
			wantErr: "the own VNI of claim ns/c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "cp.json"), "n1", 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tt.before {
				if err := s.Put(p); err != nil {
					t.Fatal(err)
				}
			}
			err = s.Put(tt.put)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvariant) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Put = %v, want an ErrInvariant containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestClaimNamedVNIRule: a claim whose own VNI is a pod's named VNI is
// refused too.
func TestClaimNamedVNIRule(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "cp.json"), "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(Holder{Kind: KindPod, Namespace: "ns", Name: "a", VNI: 2000, Options: storage(900)}); err != nil {
		t.Fatal(err)
	}
	err = s.Put(Holder{Kind: KindClaim, UID: "c1", Namespace: "ns", Name: "c", VNI: 900})
	if !errors.Is(err, ErrInvariant) || !strings.Contains(err.Error(), "claim ns/c's own VNI 900 is a named VNI pod ns/a joins") {
		t.Fatalf("PutClaim = %v", err)
	}
}

func TestOptionsCloneAndVNIs(t *testing.T) {
	var nilOpts *ServiceOptions
	if nilOpts.Clone() != nil || len(nilOpts.VNIs(5)) != 1 {
		t.Fatal("nil options")
	}
	o := &ServiceOptions{Limits: map[string]Limit{"LEs": {Max: 1, Res: 1}}, ExtraVNIs: []NamedVNI{{"s", 900}, {"t", 901}}}
	c := o.Clone()
	c.Limits["LEs"] = Limit{}
	c.ExtraVNIs[0].VNI = 1
	if o.Limits["LEs"].Max != 1 || o.ExtraVNIs[0].VNI != 900 {
		t.Fatal("Clone shares its maps or slices")
	}
	if got := o.VNIs(2000); len(got) != 3 || got[0] != 2000 || got[1] != 900 || got[2] != 901 {
		t.Fatalf("VNIs = %v, want the own VNI first", got)
	}
}
