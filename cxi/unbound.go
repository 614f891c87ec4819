package cxi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
)

// CreateUnbound creates a service for spec that admits nobody yet: it is
// allocated with restricted membership and no member, then disabled, so
// that no LNI can be allocated on it (a disabled service refuses with
// EKEYREVOKED, a non-member with EPERM). [Client.Bind] admits the member
// and enables it later. This is the DRA path's prepare step, which runs
// before the pod's network namespace exists. spec.Members must be empty.
//
// The driver enables a restricted-VNI service at allocation whatever the
// request's enable bit says, so the service is briefly enabled with no
// member: it admits nobody even then. If disabling fails the service is
// destroyed. Errors are those of [Client.Create].
func (c *Client) CreateUnbound(ctx context.Context, spec ServiceSpec) (Service, error) {
	if len(spec.Members) != 0 {
		return Service{}, fmt.Errorf("%w: an unbound service has no members yet, got %d", ErrInvalidSpec, len(spec.Members))
	}
	// Validate the rest with a placeholder member, which is not sent.
	probe := spec
	probe.Members = []Member{{Type: MemberNetNS, ID: 1}}
	if err := probe.Validate(); err != nil {
		return Service{}, err
	}
	if err := ctx.Err(); err != nil {
		return Service{}, err
	}
	id, err := c.allocate(ctx, spec)
	if err != nil {
		return Service{}, fmt.Errorf("create unbound service: %w", err)
	}
	svc, err := c.disable(id)
	if err != nil {
		return Service{}, fmt.Errorf("create unbound service: %w", c.undo(id, err))
	}
	c.log.Debug("created unbound CXI service", "svc_id", id, "vnis", svc.VNIs, "tcs", spec.TCs.String())
	return svc, nil
}

// disable disables service id and reads it back, checking that it is
// disabled and has no member.
func (c *Client) disable(id uint32) (Service, error) {
	if err := c.dev.EnableService(id, false); err != nil {
		return Service{}, fmt.Errorf("disable service %d: %w", id, err)
	}
	svc, err := c.get(id)
	if err != nil {
		return Service{}, err
	}
	if svc.Enabled || !svc.RestrictedMembers || len(svc.Members) != 0 {
		return Service{}, fmt.Errorf("service %d is not disabled and memberless after creation (enabled %v, members %v): %w",
			id, svc.Enabled, svc.Members, syscall.EIO)
	}
	return svc, nil
}

// ErrBound is returned by [Client.Bind] when the service already admits
// another member: the driver can add network namespaces but never remove
// one (SVC_UPDATE does not rebuild the service's profiles), so a service
// whose namespace was replaced must be destroyed and made again.
var ErrBound = errors.New("service already admits another member")

// Bind admits the network namespace inode to service id, which
// [Client.CreateUnbound] made, and enables it: disable (it may be enabled
// already, with the same member, after an interrupted bind),
// SVC_SET_NETNS, enable, then read it back. Binding the member it already
// has only makes sure it is enabled. It fails with an error wrapping
// ErrBound when the service admits any other member; then nothing was
// changed. Errors also wrap ErrNotFound for a missing service.
func (c *Client) Bind(ctx context.Context, id, inode uint32) (Service, error) {
	if inode == 0 || inode == invalidID {
		return Service{}, fmt.Errorf("%w: netns %d is not a namespace inode", ErrInvalidSpec, inode)
	}
	if err := ctx.Err(); err != nil {
		return Service{}, err
	}
	svc, err := c.get(id)
	if err != nil {
		return Service{}, fmt.Errorf("bind service %d: %w", id, err)
	}
	want := Member{Type: MemberNetNS, ID: inode}
	switch {
	case !svc.RestrictedMembers:
		return Service{}, fmt.Errorf("bind service %d: it admits everyone: %w", id, ErrBound)
	case len(svc.Members) == 1 && svc.Members[0] == want:
		if svc.Enabled {
			return svc, nil
		}
	case len(svc.Members) != 0:
		return Service{}, fmt.Errorf("bind service %d to netns %d: it admits %s: %w", id, inode, membersString(svc), ErrBound)
	default:
		if svc.Enabled {
			if err := c.dev.EnableService(id, false); err != nil {
				return Service{}, fmt.Errorf("bind service %d: disable: %w", id, classify(err))
			}
		}
		if err := c.dev.SetNetns(id, inode); err != nil {
			return Service{}, fmt.Errorf("bind service %d: admit netns %d: %w", id, inode, classify(err))
		}
	}
	if err := c.dev.EnableService(id, true); err != nil {
		return Service{}, fmt.Errorf("bind service %d: enable: %w", id, classify(err))
	}
	svc, err = c.get(id)
	if err != nil {
		return Service{}, fmt.Errorf("bind service %d: %w", id, err)
	}
	if !svc.Enabled || !slices.Equal(svc.Members, []Member{want}) {
		return Service{}, fmt.Errorf("bind service %d: read back enabled %v with members %v, want netns %d: %w",
			id, svc.Enabled, svc.Members, inode, syscall.EIO)
	}
	c.log.Debug("bound CXI service", "svc_id", id, "netns", inode)
	return svc, nil
}
