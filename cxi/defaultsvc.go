package cxi

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// OpenToNode reports whether processes nobody chose may use the service:
// it is enabled, has a VNI to give, and admits either every process of
// the node (restricted_members=0, as the default service is made) or root
// (uid 0 or gid 0), which every pod's root containers are without user
// namespaces. Such a service gives its VNIs to every pod holding a NIC,
// whatever job it belongs to, so they share a network across jobs; on the
// default service this is what HPE's documentation enables with
// `cxi_service enable -s 1`. Restricted to other members it is the admin's
// deliberate grant, as a fallback UID is.
func (s Service) OpenToNode() bool {
	open, _ := s.exposure()
	return open
}

// exposure is [Service.OpenToNode] and a sentence saying why.
func (s Service) exposure() (bool, string) {
	if !s.Enabled {
		return false, "disabled"
	}
	vnis := s.vniWords()
	if vnis == "" {
		return false, "enabled, with no VNI to give"
	}
	if !s.RestrictedMembers {
		return true, "enabled with open membership: every process of the node may use " + vnis
	}
	for _, m := range s.Members {
		if (m.Type == MemberUID || m.Type == MemberGID) && m.ID == 0 {
			return true, fmt.Sprintf("enabled for %s: every root process of the node, in any pod, may use %s", m, vnis)
		}
	}
	return false, "enabled, restricted to " + membersString(s)
}

// vniWords names the VNIs the service gives ("VNIs 1, 10", "VNIs
// 1024-2047"), or "" when it gives none.
func (s Service) vniWords() string {
	switch {
	case !s.RestrictedVNIs && s.VNIRange != nil:
		return "VNIs " + s.VNIRange.String()
	case !s.RestrictedVNIs || len(s.VNIs) == 0:
		return ""
	}
	words := make([]string, len(s.VNIs))
	for i, v := range s.VNIs {
		words[i] = fmt.Sprint(v)
	}
	return "VNIs " + strings.Join(words, ", ")
}

// DefaultServiceFinding is what [CheckDefaultService] found.
type DefaultServiceFinding struct {
	// Service is the default service as the driver reports it.
	Service Service
	// Open reports that it is open to the node ([Service.OpenToNode]),
	// which defeats the isolation of the services the agent makes.
	Open bool
	// Reason says what was found, for logs and readiness.
	Reason string
}

// ServiceGetter reads one service; *Client is one.
type ServiceGetter interface {
	Get(ctx context.Context, id uint32) (Service, error)
}

// CheckDefaultService reads a NIC's default service (ID 1) and says
// whether it is open to the node. The driver keeps it disabled unless it
// was loaded with disable_default_svc=0 or an admin enabled it since, so
// it is checked again from time to time rather than once. A NIC without
// one (no driver does that) is reported closed.
func CheckDefaultService(ctx context.Context, c ServiceGetter) (DefaultServiceFinding, error) {
	s, err := c.Get(ctx, DefaultServiceID)
	switch {
	case errors.Is(err, ErrNotFound):
		return DefaultServiceFinding{Reason: "no default service"}, nil
	case err != nil:
		return DefaultServiceFinding{}, fmt.Errorf("check the default service: %w", err)
	}
	open, why := s.exposure()
	return DefaultServiceFinding{Service: s, Open: open, Reason: why}, nil
}
