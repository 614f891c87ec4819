package deviceplugin

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func allocReq(ids ...[]string) *pluginapi.AllocateRequest {
	req := &pluginapi.AllocateRequest{}
	for _, c := range ids {
		req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: c})
	}
	return req
}

func TestAllocateOverGRPC(t *testing.T) {
	h := newHarness(t, nil)
	devs := testDevices()
	devs[3].Healthy = false
	h.srv.Update(devs)
	h.startAndRegister()
	client := h.kubelet.client(testEndpoint)

	resp, err := client.Allocate(t.Context(), allocReq([]string{"dev0", "dev1"}, []string{"dev2"}))
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if n := len(resp.GetContainerResponses()); n != 2 {
		t.Fatalf("%d container responses, want 2", n)
	}
	c0 := resp.GetContainerResponses()[0]
	if got := c0.GetEnvs()["FAKE_DEVICES"]; got != "[dev0 dev1]" {
		t.Errorf("container 0 env = %q, want the resource's answer", got)
	}
	if n := len(c0.GetDevices()); n != 2 || c0.GetDevices()[1].GetHostPath() != "/dev/dev1" {
		t.Errorf("container 0 device specs = %v", c0.GetDevices())
	}
	if got := recv(t, h.res.allocs, "resource Allocate"); !slices.Equal(got, []string{"dev0", "dev1"}) {
		t.Errorf("resource got %v", got)
	}

	for _, tc := range []struct {
		name string
		req  *pluginapi.AllocateRequest
		code codes.Code
	}{
		{"unknown device", allocReq([]string{"dev0", "nope"}), codes.InvalidArgument},
		{"unhealthy device", allocReq([]string{"dev3"}), codes.FailedPrecondition},
		{"no devices", allocReq([]string{}), codes.InvalidArgument},
		{"device twice", allocReq([]string{"dev1", "dev1"}), codes.InvalidArgument},
		{"second container bad", allocReq([]string{"dev0"}, []string{"gone"}), codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.Allocate(t.Context(), tc.req)
			if got := status.Code(err); got != tc.code {
				t.Errorf("Allocate error = %v, want code %v", err, tc.code)
			}
		})
	}

	// An empty request is answered with no containers rather than an error.
	if resp, err := client.Allocate(t.Context(), &pluginapi.AllocateRequest{}); err != nil || len(resp.GetContainerResponses()) != 0 {
		t.Errorf("empty Allocate = %v, %v", resp, err)
	}

	if n := testutil.ToFloat64(h.srv.allocatedOK); n != 2 {
		t.Errorf("allocations{success} = %v, want 2 (containers)", n)
	}
	if n := testutil.ToFloat64(h.srv.allocateFailed); n != 5 {
		t.Errorf("allocations{failure} = %v, want 5", n)
	}
	if n := testutil.CollectAndCount(h.srv.m.allocateSeconds, "slingshot_agent_deviceplugin_allocate_duration_seconds"); n != 1 {
		t.Errorf("allocate histogram series = %d, want 1", n)
	}
	if got := histogramCount(t, h, "slingshot_agent_deviceplugin_allocate_duration_seconds"); got != 7 {
		t.Errorf("allocate histogram count = %d, want 7 calls", got)
	}
}

// histogramCount returns the sample count of the named histogram of the
// test resource, read through the registry as Prometheus would scrape it.
func histogramCount(t *testing.T, h *harness, name string) uint64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource" && l.GetValue() == testResource {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	t.Fatalf("histogram %s not registered", name)
	return 0
}

func TestAllocateResourceErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
	}{
		{"plain error", errTest, codes.Internal},
		{"resource status kept", status.Error(codes.ResourceExhausted, "no VNI"), codes.ResourceExhausted},
		{"wrapped sentinel", errors.Join(errTest, ErrUnhealthyDevice), codes.FailedPrecondition},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.res.allocErr = tc.err
			h.srv.Update(testDevices())
			h.startAndRegister()
			_, err := h.kubelet.client(testEndpoint).Allocate(t.Context(), allocReq([]string{"dev0"}))
			if got := status.Code(err); got != tc.code {
				t.Errorf("Allocate error = %v, want code %v", err, tc.code)
			}
		})
	}
}

func TestPreStartContainer(t *testing.T) {
	h := newHarness(t, nil)
	devs := testDevices()
	devs[1].Healthy = false
	h.srv.Update(devs)
	h.startAndRegister()
	client := h.kubelet.client(testEndpoint)

	// An unhealthy device still gets its PreStart: the container keeps it.
	if _, err := client.PreStartContainer(t.Context(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"dev0", "dev1"}}); err != nil {
		t.Fatalf("PreStartContainer: %v", err)
	}
	if got := recv(t, h.res.preStarts, "resource PreStart"); !slices.Equal(got, []string{"dev0", "dev1"}) {
		t.Errorf("resource got %v", got)
	}
	if _, err := client.PreStartContainer(t.Context(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"ghost"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("PreStart of unknown device = %v, want InvalidArgument", err)
	}
	h.res.preStartErr = status.Error(codes.Unavailable, "controller unreachable")
	if _, err := client.PreStartContainer(t.Context(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"dev2"}}); status.Code(err) != codes.Unavailable {
		t.Errorf("PreStart with failing resource = %v, want Unavailable", err)
	}
	if got := histogramCount(t, h, "slingshot_agent_deviceplugin_prestart_duration_seconds"); got != 3 {
		t.Errorf("prestart histogram count = %d, want 3", got)
	}
}

// preferringResource overrides the NUMA policy.
type preferringResource struct {
	*fakeResource
	answer []string
	err    error
}

func (p *preferringResource) PreferredAllocation(_ context.Context, available, mustInclude []string, size int) ([]string, error) {
	return p.answer, p.err
}

func TestGetPreferredAllocationOverGRPC(t *testing.T) {
	req := func(avail, must []string, size int32) *pluginapi.PreferredAllocationRequest {
		return &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: avail, MustIncludeDeviceIDs: must, AllocationSize: size},
		}}
	}
	all := []string{"dev0", "dev1", "dev2", "dev3"}
	for _, tc := range []struct {
		name      string
		preferrer *preferringResource // nil: built-in policy
		unhealthy string
		req       *pluginapi.PreferredAllocationRequest
		want      []string
	}{
		{name: "numa aligned pair", req: req(all, nil, 2), want: []string{"dev0", "dev1"}},
		{name: "follows must-include node", req: req(all, []string{"dev3"}, 2), want: []string{"dev2", "dev3"}},
		{name: "skips unhealthy", unhealthy: "dev0", req: req(all, nil, 2), want: []string{"dev2", "dev3"}},
		{name: "ignores unknown", req: req([]string{"x", "dev2", "dev3"}, nil, 2), want: []string{"dev2", "dev3"}},
		{name: "too large gives empty answer", req: req(all, nil, 5), want: nil},
		{name: "resource override", preferrer: &preferringResource{answer: []string{"dev0", "dev3"}}, req: req(all, nil, 2), want: []string{"dev0", "dev3"}},
		{name: "invalid override falls back", preferrer: &preferringResource{answer: []string{"dev0", "zzz"}}, req: req(all, nil, 2), want: []string{"dev0", "dev1"}},
		{name: "override error falls back", preferrer: &preferringResource{err: errTest}, req: req(all, []string{"dev2"}, 2), want: []string{"dev2", "dev3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *ServerConfig) {
				if tc.preferrer != nil {
					tc.preferrer.fakeResource = newFakeResource(testResource)
					c.Resource = tc.preferrer
				}
			})
			devs := testDevices()
			for i := range devs {
				if devs[i].ID == tc.unhealthy {
					devs[i].Healthy = false
				}
			}
			h.srv.Update(devs)
			h.startAndRegister()
			resp, err := h.kubelet.client(testEndpoint).GetPreferredAllocation(t.Context(), tc.req)
			if err != nil {
				t.Fatalf("GetPreferredAllocation: %v", err)
			}
			if got := resp.GetContainerResponses()[0].GetDeviceIDs(); !slices.Equal(got, tc.want) {
				t.Errorf("preferred = %v, want %v", got, tc.want)
			}
		})
	}
}
