package cxi

import (
	"errors"
	"slices"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

func TestTrafficClassesString(t *testing.T) {
	for tcs, want := range map[TrafficClasses]string{
		DefaultTrafficClasses: "0xa", // SLINGSHOT_TCS as Slurm sets it by default
		TCDedicatedAccess:     "0x1",
		AllTrafficClasses:     "0xf",
		TCBulkData:            "0x4",
	} {
		if got := tcs.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(tcs), got, want)
		}
	}
	if got := DefaultTrafficClasses.Names(); !slices.Equal(got, []string{"LOW_LATENCY", "BEST_EFFORT"}) {
		t.Errorf("Names = %q", got)
	}
}

func TestParseTrafficClasses(t *testing.T) {
	tests := []struct {
		in   string
		want TrafficClasses
		bad  bool
	}{
		{in: "0xa", want: TCLowLatency | TCBestEffort},
		{in: "0XF", want: AllTrafficClasses},
		{in: "8", want: TCBestEffort},
		{in: " 0x1 ", want: TCDedicatedAccess},
		{in: "LOW_LATENCY:BEST_EFFORT", want: 0xa},
		{in: "bulk_data,dedicated_access", want: 0x5},
		{in: "BEST_EFFORT|BEST_EFFORT", want: 0x8},
		{in: "", bad: true},
		{in: "0", bad: true},
		{in: "0x10", bad: true}, // the Ethernet class is not for services
		{in: "0x100", bad: true},
		{in: "-1", bad: true},
		{in: "ETH", bad: true},
		{in: "LOW_LATENCY:", want: 0x2},
		{in: ":", bad: true},
		{in: "0xg", bad: true},
	}
	for _, tc := range tests {
		got, err := ParseTrafficClasses(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("Parse(%q) = %v, %v; want ErrInvalidSpec", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseTrafficClasses(f *testing.F) {
	for _, s := range []string{"0xa", "10", "LOW_LATENCY:BEST_EFFORT", "bulk_data,dedicated_access", "", "0x1ff", "ETH|x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tcs, err := ParseTrafficClasses(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("error %v does not wrap ErrInvalidSpec", err)
			}
			return
		}
		if tcs == 0 || tcs&^AllTrafficClasses != 0 {
			t.Fatalf("Parse(%q) = %v, outside the user classes", s, tcs)
		}
		// Both printed forms parse back to the same set.
		for _, form := range []string{tcs.String(), joinNames(tcs)} {
			again, err := ParseTrafficClasses(form)
			if err != nil || again != tcs {
				t.Fatalf("Parse(%q) = %v, %v; want %v", form, again, err, tcs)
			}
		}
	})
}

func joinNames(tcs TrafficClasses) string {
	s := ""
	for i, n := range tcs.Names() {
		if i > 0 {
			s += ":"
		}
		s += n
	}
	return s
}

func TestMemberString(t *testing.T) {
	if got := (Member{MemberNetNS, 4026532000}).String(); got != "netns=4026532000" {
		t.Errorf("got %q", got)
	}
	if got := (Member{MemberGID, 5}).String(); got != "gid=5" {
		t.Errorf("got %q", got)
	}
	if got := MemberType(9).String(); got != "MemberType(9)" {
		t.Errorf("got %q", got)
	}
}

func TestDefaultLimitsReserveNothing(t *testing.T) {
	l := DefaultLimits()
	r := l.rsrc()
	for ty, lim := range r {
		if lim.Res != 0 {
			t.Errorf("%s reserves %d", uapi.RsrcType(ty), lim.Res)
		}
		if want := sim.DefaultMax()[ty]; ty != int(uapi.RsrcTLE) && lim.Max != want {
			t.Errorf("%s max %d, want the device maximum %d", uapi.RsrcType(ty), lim.Max, want)
		}
	}
	if r[uapi.RsrcTLE] != (uapi.Limits{}) {
		t.Errorf("TLEs %+v, want none", r[uapi.RsrcTLE])
	}
	if limitsFrom(r) != l {
		t.Error("limits do not survive the descriptor form")
	}
}

func TestSpecDescriptor(t *testing.T) {
	spec := ServiceSpec{VNIs: []uint16{1024, 7}, Members: []Member{{MemberGID, 5}, {MemberUID, 6}}, TCs: 0x9}
	d := spec.desc(DefaultLimits())
	if !d.RestrictedMembers || !d.RestrictedVNIs || !d.RestrictedTCs || !d.ResourceLimits || d.IsSystemSvc {
		t.Fatalf("flags %+v", d)
	}
	if d.NumVldVNIs != 2 || d.VNIs != [4]uint16{1024, 7} {
		t.Fatalf("VNIs %d %v", d.NumVldVNIs, d.VNIs)
	}
	if d.TCs != [uapi.NumTCs]bool{true, false, false, true, false} {
		t.Fatalf("TCs %v", d.TCs)
	}
	if d.Members != [2]uapi.SvcMember{{Type: uapi.MemberGID, ID: 5}, {Type: uapi.MemberUID, ID: 6}} {
		t.Fatalf("members %+v", d.Members)
	}
	// A netns member goes in with SVC_SET_NETNS, not in the descriptor.
	n := netnsSpec(1024).desc(DefaultLimits())
	if n.Members != [2]uapi.SvcMember{} || !n.RestrictedMembers {
		t.Fatalf("netns descriptor members %+v", n.Members)
	}
	back := serviceFrom(d)
	if !slices.Equal(back.Members, spec.Members) || back.TCs != spec.TCs || !slices.Equal(back.VNIs, spec.VNIs) {
		t.Fatalf("serviceFrom = %+v", back)
	}
}

func TestAllocErrorMessage(t *testing.T) {
	err := &AllocError{Fail: uapi.FailInfo{NoTLEPools: true}, Err: errors.New("SVC_ALLOC: no space left on device")}
	if got, want := err.Error(), "no resources for the service (no TLE pools): SVC_ALLOC: no space left on device"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}
