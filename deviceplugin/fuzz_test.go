package deviceplugin

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// decodePreferredInput turns fuzz bytes into a request: a spec of
// semicolon-separated fields "avail;must;topo" where avail and must are
// comma-separated IDs and topo is "id=n.n,id=n".
func decodePreferredInput(spec string) (avail, must []string, topo map[string][]int64) {
	fields := strings.SplitN(spec, ";", 3)
	for len(fields) < 3 {
		fields = append(fields, "")
	}
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	avail, must = split(fields[0]), split(fields[1])
	topo = make(map[string][]int64)
	for _, kv := range split(fields[2]) {
		id, nodes, _ := strings.Cut(kv, "=")
		for n := range strings.SplitSeq(nodes, ".") {
			var v int64
			for _, c := range n {
				v = v*10 + int64(c%10)
			}
			if strings.HasPrefix(n, "-") {
				v = -v
			}
			topo[id] = append(topo[id], v)
		}
	}
	return avail, must, topo
}

func FuzzPreferredAllocation(f *testing.F) {
	f.Add("cxi0,cxi1,cxi2,cxi3;;cxi0=0,cxi1=0,cxi2=1,cxi3=1", 2)
	f.Add("cxi0,cxi1,cxi2,cxi3;cxi3;cxi0=0,cxi1=0,cxi2=1,cxi3=1", 3)
	f.Add("a,b,c;a,b,c,d;a=0.1,b=1", 2)
	f.Add("a,a,a;a;", 1)
	f.Add(";;", 0)
	f.Add("x,y;;x=-1,y=-1.-1", 2)
	f.Add("n0,n1,n2,n3,n4,n5;n5,n9;n0=3,n1=2,n2=1,n3=0,n4=0.1.2.3", -7)
	f.Fuzz(func(t *testing.T, spec string, size int) {
		avail, must, topo := decodePreferredInput(spec)
		got := PreferredAllocation(avail, must, size, topo)

		distinct := slices.Clone(avail)
		slices.Sort(distinct)
		distinct = slices.Compact(distinct)
		var mustIn []string
		for _, id := range must {
			if slices.Contains(distinct, id) && !slices.Contains(mustIn, id) {
				mustIn = append(mustIn, id)
			}
		}
		feasible := size >= 1 && size <= len(distinct) && len(mustIn) <= size
		if !feasible {
			if got != nil {
				t.Fatalf("infeasible request (size %d, %d available, %d must) answered %v", size, len(distinct), len(mustIn), got)
			}
			return
		}
		if len(got) != size {
			t.Fatalf("got %d devices %v, want %d", len(got), got, size)
		}
		for i, id := range got {
			if !slices.Contains(distinct, id) {
				t.Fatalf("%q not available", id)
			}
			if slices.Contains(got[:i], id) {
				t.Fatalf("%q returned twice", id)
			}
			if i > 0 && naturalCompare(got[i-1], id) >= 0 {
				t.Fatalf("result %v not in natural order", got)
			}
		}
		for _, id := range mustIn {
			if !slices.Contains(got, id) {
				t.Fatalf("must-include %q missing from %v", id, got)
			}
		}
		if again := PreferredAllocation(avail, must, size, topo); !slices.Equal(again, got) {
			t.Fatalf("not deterministic: %v then %v", got, again)
		}
		// The server's own validation accepts every answer of the policy.
		if err := validPreferred(got, avail, must, size); err != nil {
			t.Fatalf("validPreferred rejects the policy's answer: %v", err)
		}
	})
}

func FuzzNaturalCompare(f *testing.F) {
	f.Add("cxi2", "cxi10", "cxi010")
	f.Add("", "0", "00")
	f.Add("a1b2", "a01b2", "a1b02")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		ab, ba := naturalCompare(a, b), naturalCompare(b, a)
		if ab != -ba {
			t.Fatalf("not antisymmetric: cmp(%q,%q)=%d, cmp(%q,%q)=%d", a, b, ab, b, a, ba)
		}
		if (ab == 0) != (a == b) {
			t.Fatalf("cmp(%q,%q)=%d but equality is %v", a, b, ab, a == b)
		}
		s := []string{a, b, c}
		slices.SortFunc(s, naturalCompare)
		if naturalCompare(s[0], s[1]) > 0 || naturalCompare(s[1], s[2]) > 0 || naturalCompare(s[0], s[2]) > 0 {
			t.Fatalf("not transitive: sorted %q", s)
		}
	})
}

// FuzzServiceRequests feeds the kubelet-facing handlers random device IDs
// and sizes, as a confused or newer kubelet might send them: they must
// answer or refuse, never panic, never prefer an ID outside the request's
// available list, and never hand an unknown or unhealthy ID to the
// Resource.
func FuzzServiceRequests(f *testing.F) {
	f.Add("dev0,dev1,dev2,dev3;dev3;", int32(2))
	f.Add("dev0,dev0,ghost;ghost;", int32(1))
	f.Add(";;", int32(-1))
	f.Add("dev3,dev1;;", int32(2147483647))
	s, err := NewServer(ServerConfig{Resource: newFakeResource(testResource), PluginDir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	devs := testDevices()
	devs[3].Healthy = false
	s.Update(devs)
	svc := &pluginService{s: s}
	f.Fuzz(func(t *testing.T, spec string, size int32) {
		avail, must, _ := decodePreferredInput(spec)
		resp, err := svc.GetPreferredAllocation(t.Context(), &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
				{AvailableDeviceIDs: avail, MustIncludeDeviceIDs: must, AllocationSize: size},
			},
		})
		if err != nil {
			t.Fatalf("GetPreferredAllocation: %v", err)
		}
		for _, id := range resp.GetContainerResponses()[0].GetDeviceIDs() {
			if !slices.Contains(avail, id) {
				t.Fatalf("preferred %q outside available %v", id, avail)
			}
		}

		ares, err := svc.Allocate(t.Context(), &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: avail}},
		})
		if err == nil {
			for _, id := range avail {
				if d, ok := s.currentDevices().byID[id]; !ok || !d.Healthy {
					t.Fatalf("Allocate accepted %q (known %v)", id, ok)
				}
			}
			if len(ares.GetContainerResponses()) != 1 {
				t.Fatalf("Allocate answered %d containers", len(ares.GetContainerResponses()))
			}
		} else if c := status.Code(err); c != codes.InvalidArgument && c != codes.FailedPrecondition {
			t.Fatalf("Allocate error code %v: %v", c, err)
		}
		if _, err := svc.PreStartContainer(t.Context(), &pluginapi.PreStartContainerRequest{DevicesIds: must}); err != nil {
			if c := status.Code(err); c != codes.InvalidArgument {
				t.Fatalf("PreStart error code %v: %v", c, err)
			}
		}
	})
}
