package engine

import (
	"slices"
	"testing"

	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

func TestRailName(t *testing.T) {
	cases := []struct {
		base  string
		index int
		want  string
	}{
		{"hsn0", 0, "hsn0"},
		{"hsn0", 1, "hsn1"},
		{"hsn0", 3, "hsn3"},
		{"fab2", 1, "fab3"},
		{"fabric", 0, "fabric"},
		{"fabric", 1, "fabric1"},
		{"eth09", 2, "eth11"},
	}
	for _, tc := range cases {
		if got := railName(tc.base, tc.index); got != tc.want {
			t.Errorf("railName(%q, %d) = %q, want %q", tc.base, tc.index, got, tc.want)
		}
	}
}

func TestRailsOf(t *testing.T) {
	rails := []Rail{{"cxi0", "hsn0"}, {"cxi1", ""}, {"cxi2", "hsn2"}}
	cases := []struct {
		name    string
		req     HSNRequest
		want    []string // netdevs
		wantErr bool
	}{
		{"first NIC with a netdev", HSNRequest{Rails: rails}, []string{"hsn0"}, false},
		{"every NIC with one", HSNRequest{Rails: rails, Policy: HSNPolicy{AllNICs: true}}, []string{"hsn0", "hsn2"}, false},
		{"the netdev the pod names", HSNRequest{Rails: rails, Policy: HSNPolicy{AllNICs: true}, Want: netreq.Request{NetDev: "hsn2"}}, []string{"hsn2"}, false},
		{"no netdev", HSNRequest{Rails: []Rail{{"cxi1", ""}}}, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := railsOf(tc.req)
			if (err != nil) != tc.wantErr {
				t.Fatalf("railsOf = %v, %v; want error %v", got, err, tc.wantErr)
			}
			var devs []string
			for _, r := range got {
				devs = append(devs, r.Netdev)
			}
			if !slices.Equal(devs, tc.want) {
				t.Fatalf("rails %v, want %v", devs, tc.want)
			}
		})
	}
}
