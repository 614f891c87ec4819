package cxi

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
)

func unboundSpec(vni uint16) ServiceSpec {
	return ServiceSpec{VNIs: []uint16{vni}, TCs: TCBestEffort}
}

// TestCreateUnboundThenBind follows the DRA path on the simulated driver:
// the unbound service refuses every LNI (disabled), the bound one admits
// its namespace only, and binding again is harmless.
func TestCreateUnboundThenBind(t *testing.T) {
	ctx := context.Background()
	s, dev := newSim(t, t.TempDir(), sim.Options{})
	c := NewClient(dev)

	svc, err := c.CreateUnbound(ctx, unboundSpec(2000))
	if err != nil {
		t.Fatal(err)
	}
	if svc.Enabled || len(svc.Members) != 0 || !svc.RestrictedMembers {
		t.Fatalf("unbound service = %+v, want disabled, restricted, no members", svc)
	}
	if err := s.SetInUse(svc.ID, 1); !errors.Is(err, syscall.EKEYREVOKED) {
		t.Fatalf("LNI on an unbound service: %v, want EKEYREVOKED", err)
	}

	bound, err := c.Bind(ctx, svc.ID, podNetns)
	if err != nil {
		t.Fatal(err)
	}
	if !bound.Enabled || len(bound.Members) != 1 || bound.Members[0] != (Member{Type: MemberNetNS, ID: podNetns}) {
		t.Fatalf("bound service = %+v, want enabled with netns %d alone", bound, podNetns)
	}
	again, err := c.Bind(ctx, svc.ID, podNetns)
	if err != nil || !again.Enabled {
		t.Fatalf("bind again = %+v, %v; want the same enabled service", again, err)
	}
	if _, err := c.Bind(ctx, svc.ID, podNetns+1); !errors.Is(err, ErrBound) {
		t.Fatalf("bind to another namespace: %v, want ErrBound", err)
	}
	got, err := c.Get(ctx, svc.ID)
	if err != nil || !got.Enabled || len(got.Members) != 1 || got.Members[0].ID != podNetns {
		t.Fatalf("after the refused bind = %+v, %v; want it unchanged", got, err)
	}
}

// TestBindFinishesAnInterruptedBind: a bind that stopped after
// SVC_SET_NETNS leaves the service disabled with its member; binding the
// same namespace again enables it.
func TestBindFinishesAnInterruptedBind(t *testing.T) {
	ctx := context.Background()
	_, dev := newSim(t, t.TempDir(), sim.Options{})
	cd := &countingDevice{Device: dev}
	c := NewClient(cd)
	svc, err := c.CreateUnbound(ctx, unboundSpec(2001))
	if err != nil {
		t.Fatal(err)
	}
	cd.fail = func(op string, id uint32) error {
		if op == "enable=true" {
			return syscall.EIO
		}
		return nil
	}
	if _, err := c.Bind(ctx, svc.ID, podNetns); !errors.Is(err, syscall.EIO) {
		t.Fatalf("bind with a failing enable: %v, want EIO", err)
	}
	cd.fail = nil
	got, err := c.Bind(ctx, svc.ID, podNetns)
	if err != nil || !got.Enabled {
		t.Fatalf("bind after the interruption = %+v, %v; want enabled", got, err)
	}
}

func TestCreateUnboundRefuses(t *testing.T) {
	ctx := context.Background()
	_, dev := newSim(t, t.TempDir(), sim.Options{})
	c := NewClient(dev)
	for name, spec := range map[string]ServiceSpec{
		"members": {VNIs: []uint16{2000}, TCs: TCBestEffort, Members: []Member{{Type: MemberUID, ID: 1}}},
		"no VNI":  {TCs: TCBestEffort},
		"no TCs":  {VNIs: []uint16{2000}},
	} {
		if _, err := c.CreateUnbound(ctx, spec); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
	if _, err := c.Bind(ctx, 4242, podNetns); !errors.Is(err, ErrNotFound) {
		t.Errorf("bind a missing service: %v, want ErrNotFound", err)
	}
	if _, err := c.Bind(ctx, 4242, 0); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("bind netns 0: %v, want ErrInvalidSpec", err)
	}
}
