package hsnlink

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestSpecNormalized(t *testing.T) {
	good := Spec{Parent: "hsn0", Address: netip.MustParsePrefix("10.150.3.7/16")}
	with := func(f func(*Spec)) Spec {
		s := good
		f(&s)
		return s
	}
	cases := []struct {
		name string
		spec Spec
		want string // in the error; "" for valid
	}{
		{"valid", good, ""},
		{"valid v6 with MTU", with(func(s *Spec) { s.Address = netip.MustParsePrefix("fd00::7/64"); s.MTU = 9000 }), ""},
		{"no parent", with(func(s *Spec) { s.Parent = "" }), "parent: empty"},
		{"long parent", with(func(s *Spec) { s.Parent = "hsn0123456789abc" }), "longer than 15"},
		{"slash in name", with(func(s *Spec) { s.Name = "a/b" }), "name: \"a/b\""},
		{"dot name", with(func(s *Spec) { s.Name = ".." }), "is not a name"},
		{"unknown mode", with(func(s *Spec) { s.Mode = 7 }), "unknown mode 7"},
		{"no address", with(func(s *Spec) { s.Address = netip.Prefix{} }), "no address"},
		{"unspecified", with(func(s *Spec) { s.Address = netip.MustParsePrefix("0.0.0.0/16") }), "not a unicast host address"},
		{"multicast", with(func(s *Spec) { s.Address = netip.MustParsePrefix("239.0.0.1/8") }), "not a unicast host address"},
		{"v4-mapped", with(func(s *Spec) { s.Address = netip.MustParsePrefix("::ffff:10.0.0.1/112") }), "not a unicast host address"},
		{"negative MTU", with(func(s *Spec) { s.MTU = -1 }), "negative MTU -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.spec.normalized()
			if c.want == "" {
				if err != nil {
					t.Fatalf("normalized = %v", err)
				}
				if got.Name != DefaultName {
					t.Errorf("Name = %q, want the default %q", got.Name, DefaultName)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("normalized = %v, want ErrInvalidSpec naming %q", err, c.want)
			}
		})
	}
}

func TestCheckDiffs(t *testing.T) {
	s := Spec{Parent: "hsn0", Name: "hsn0", Address: netip.MustParsePrefix("10.150.3.7/16")}
	ok := observed{kind: "macvlan", mode: "bridge", parent: 5, up: true, mtu: 1500, addrs: []netip.Prefix{s.Address}}
	with := func(f func(*observed)) observed {
		o := ok
		f(&o)
		return o
	}
	two := []netip.Prefix{netip.MustParsePrefix("10.150.3.8/16"), netip.MustParsePrefix("10.150.3.9/16")}
	cases := []struct {
		name string
		o    observed
		want []string
	}{
		{"same", ok, nil},
		{"extra address beside ours", with(func(o *observed) { o.addrs = append(two, s.Address) }), nil},
		{"parent not reported", with(func(o *observed) { o.parent = 0 }), nil},
		{"kind hides the rest", with(func(o *observed) { o.kind = "veth"; o.mode = ""; o.up = false; o.addrs = nil }), []string{"kind veth, want macvlan", "no address, want 10.150.3.7/16", "down, want up"}},
		{"all else", with(func(o *observed) { o.mode = "vepa"; o.parent = 6; o.addrs = two; o.up = false }), []string{
			"macvlan mode vepa, want bridge", "parent ifindex 6, want 5 (hsn0)",
			"address 10.150.3.8/16, 10.150.3.9/16, want 10.150.3.7/16", "down, want up",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := checkDiffs(c.o, s, 5)
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("checkDiffs = %q, want %q", got, c.want)
			}
		})
	}
}
