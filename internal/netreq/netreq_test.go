package netreq

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Request
		wantErr string
	}{
		{name: "empty object", in: `{}`, want: Request{}},
		{name: "all fields", in: `{"pool":"hsn0","netdev":"hsn1","interface":"net1","subnet":"10.150.3.0/24","ip":"10.150.3.7"}`,
			want: Request{Pool: "hsn0", NetDev: "hsn1", Interface: "net1", Subnet: netip.MustParsePrefix("10.150.3.0/24"), IP: netip.MustParseAddr("10.150.3.7")}},
		{name: "ip with prefix length", in: `{"ip":"10.150.3.7/16"}`, want: Request{IP: netip.MustParseAddr("10.150.3.7")}},
		{name: "ipv6", in: `{"ip":"fd00::5"}`, want: Request{IP: netip.MustParseAddr("fd00::5")}},
		{name: "unknown field", in: `{"pool":"hsn0","subent":"10.0.0.0/8"}`, wantErr: `unknown field "subent"`},
		{name: "not json", in: `hsn0`, wantErr: "want a JSON object"},
		{name: "a list", in: `[{"pool":"hsn0"}]`, wantErr: "want a JSON object"},
		{name: "trailing", in: `{} {}`, wantErr: "trailing data"},
		{name: "bad pool", in: `{"pool":"HSN_0"}`, wantErr: `pool "HSN_0"`},
		{name: "bad netdev", in: `{"netdev":"hsn0 up"}`, wantErr: `netdev "hsn0 up"`},
		{name: "bad subnet", in: `{"subnet":"10.150.3.0"}`, wantErr: `subnet "10.150.3.0"`},
		{name: "host bits", in: `{"subnet":"10.150.3.1/24"}`, wantErr: "did you mean 10.150.3.0/24"},
		{name: "bad ip", in: `{"ip":"10.150.300.7"}`, wantErr: `ip "10.150.300.7"`},
		{name: "ip outside subnet", in: `{"subnet":"10.150.3.0/24","ip":"10.150.4.7"}`, wantErr: "10.150.4.7 is outside subnet 10.150.3.0/24"},
		{name: "zone", in: `{"ip":"fe80::1%eth0"}`, wantErr: "has a zone"},
		{name: "too long", in: `{"pool":"` + strings.Repeat("a", MaxLen) + `"}`, wantErr: "more than"},
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
			if got != tt.want {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `{"pool":"hsn0","subnet":"10.150.3.0/24","ip":"10.150.3.7"}`, `{"ip":"fd00::1/64"}`, `[`, `{"ip":"fe80::1%x"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("Parse accepted %q but Validate refuses it: %v", s, err)
		}
	})
}
