package cxi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// TestItem6CheckDefaultService runs the check against the simulated
// driver's default service as the real one has it: disabled at load
// (disable_default_svc=1), enabled when the module is loaded with
// disable_default_svc=0 or an admin runs `cxi_service enable -s 1`
// (SVC_ENABLE), open to every process of the node once enabled.
func TestItem6CheckDefaultService(t *testing.T) {
	tests := []struct {
		name   string
		opts   sim.Options
		admin  func(t *testing.T, dev *uapi.Device) // what an admin does after load
		open   bool
		reason string
	}{
		{name: "disabled at load", reason: "disabled"},
		{name: "loaded with disable_default_svc=0", opts: sim.Options{DefaultServiceEnabled: true},
			open: true, reason: "enabled with open membership: every process of the node may use VNIs 1, 10"},
		{name: "enabled by an admin", admin: enableDefault(true),
			open: true, reason: "enabled with open membership: every process of the node may use VNIs 1, 10"},
		{name: "enabled, then disabled again", admin: func(t *testing.T, dev *uapi.Device) {
			enableDefault(true)(t, dev)
			enableDefault(false)(t, dev)
		}, reason: "disabled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.NoSync = true
			_, dev := newSim(t, t.TempDir(), tc.opts)
			if tc.admin != nil {
				tc.admin(t, dev)
			}
			f, err := CheckDefaultService(t.Context(), NewClient(dev))
			if err != nil {
				t.Fatal(err)
			}
			if f.Open != tc.open || f.Reason != tc.reason || !f.Service.IsDefault() {
				t.Fatalf("finding = open %v, %q (service %d); want open %v, %q", f.Open, f.Reason, f.Service.ID, tc.open, tc.reason)
			}
		})
	}
}

func enableDefault(on bool) func(*testing.T, *uapi.Device) {
	return func(t *testing.T, dev *uapi.Device) {
		t.Helper()
		if err := dev.EnableService(DefaultServiceID, on); err != nil {
			t.Fatalf("SVC_ENABLE(1, %v): %v", on, err)
		}
	}
}

// TestServiceOpenToNode: what counts as open, on service values a driver
// can report (an admin may reconfigure the default service's members and
// VNIs, which the simulator does not model).
func TestServiceOpenToNode(t *testing.T) {
	def := Service{ID: DefaultServiceID, Enabled: true, RestrictedVNIs: true, VNIs: []uint16{1, 10}}
	with := func(change func(*Service)) Service {
		s := def
		change(&s)
		return s
	}
	tests := []struct {
		name   string
		svc    Service
		open   bool
		reason string
	}{
		{"enabled, open membership", def, true, "enabled with open membership: every process of the node may use VNIs 1, 10"},
		{"disabled", with(func(s *Service) { s.Enabled = false }), false, "disabled"},
		{"a VNI range, open membership", with(func(s *Service) { s.RestrictedVNIs, s.VNIs, s.VNIRange = false, nil, &VNIRange{64, 127} }),
			true, "enabled with open membership: every process of the node may use VNIs 64-127"},
		{"no VNI", with(func(s *Service) { s.VNIs = nil }), false, "enabled, with no VNI to give"},
		{"unrestricted VNIs without a range", with(func(s *Service) { s.RestrictedVNIs, s.VNIs = false, nil }), false, "enabled, with no VNI to give"},
		{"root", with(func(s *Service) { s.RestrictedMembers, s.Members = true, []Member{{MemberUID, 5000}, {MemberUID, 0}} }),
			true, "enabled for uid=0: every root process of the node, in any pod, may use VNIs 1, 10"},
		{"root's group", with(func(s *Service) { s.RestrictedMembers, s.Members = true, []Member{{MemberGID, 0}} }),
			true, "enabled for gid=0: every root process of the node, in any pod, may use VNIs 1, 10"},
		{"a chosen uid", with(func(s *Service) { s.RestrictedMembers, s.Members = true, []Member{{MemberUID, 5000}} }),
			false, "enabled, restricted to members uid=5000"},
		{"one namespace", with(func(s *Service) { s.RestrictedMembers, s.Members = true, []Member{{MemberNetNS, 0}} }),
			false, "enabled, restricted to members netns=0"},
		{"no member at all", with(func(s *Service) { s.RestrictedMembers = true }), false, "enabled, restricted to no members"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			open, reason := tc.svc.exposure()
			if open != tc.open || reason != tc.reason || tc.svc.OpenToNode() != tc.open {
				t.Fatalf("exposure = %v, %q; want %v, %q", open, reason, tc.open, tc.reason)
			}
		})
	}
}

// getter answers Get from a function.
type getter func(id uint32) (Service, error)

func (g getter) Get(_ context.Context, id uint32) (Service, error) { return g(id) }

func TestCheckDefaultServiceErrors(t *testing.T) {
	eio := errors.New("EIO")
	_, err := CheckDefaultService(t.Context(), getter(func(uint32) (Service, error) { return Service{}, eio }))
	if !errors.Is(err, eio) || !strings.Contains(err.Error(), "default service") {
		t.Fatalf("a failed read: %v", err)
	}
	f, err := CheckDefaultService(t.Context(), getter(func(id uint32) (Service, error) {
		return Service{}, fmt.Errorf("get service %d: %w", id, ErrNotFound)
	}))
	if err != nil || f.Open || f.Reason != "no default service" {
		t.Fatalf("no default service: %+v, %v", f, err)
	}
}
