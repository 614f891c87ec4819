package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/slingshot-k8s/slingshot/cxi"
)

// Services is what the engine needs of one NIC's CXI services;
// *cxi.Client is one.
type Services interface {
	Bind(ctx context.Context, id, inode uint32) (cxi.Service, error)
	Get(ctx context.Context, id uint32) (cxi.Service, error)
}

// Target is one service to bind.
type Target struct {
	NIC string
	ID  uint32
	Drv Services
}

// BindAll admits the namespace h holds to each target's service, in
// order, and enables it. It takes h: a service may admit h's namespace
// from the first bind attempt on (the driver can take the member and then
// fail to enable), and the driver cannot take it back, so h is kept for
// holder in ns, replacing the handle kept before, until the holder's
// services are destroyed; with no target h is closed at once. It returns
// how many targets were bound (the first n) and the error of the one that
// failed, which may admit the namespace too.
//
// No service of holder may name another namespace still: the handle kept
// before is closed.
func BindAll(ctx context.Context, ns *Namespaces, holder string, h Handle, targets []Target) (int, error) {
	if len(targets) == 0 {
		_ = h.Close()
		return 0, nil
	}
	ns.Keep(holder, h)
	for i, t := range targets {
		if _, err := t.Drv.Bind(ctx, t.ID, h.Inode()); err != nil {
			return i, fmt.Errorf("bind service %d on %s: %w", t.ID, t.NIC, err)
		}
	}
	return len(targets), nil
}

// CheckBound reports, as the driver says now, whether the service id is
// enabled, admits the namespace inode alone and carries vni: what a
// container must find before it starts. The error says what differs.
func CheckBound(ctx context.Context, drv Services, nic string, id, inode uint32, vni uint16) error {
	svc, err := drv.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("service %d on %s: %w", id, nic, err)
	}
	want := cxi.Member{Type: cxi.MemberNetNS, ID: inode}
	if !svc.Enabled || !svc.RestrictedMembers || !slices.Equal(svc.Members, []cxi.Member{want}) || !slices.Contains(svc.VNIs, vni) {
		return fmt.Errorf("service %d on %s is enabled=%v with members %v and VNIs %v, want enabled with netns %d alone and VNI %d",
			id, nic, svc.Enabled, svc.Members, svc.VNIs, inode, vni)
	}
	return nil
}
