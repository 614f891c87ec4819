package cxi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// Device is the driver's service interface, as *uapi.Device provides it
// for /dev/cxiN (and, through uapi.NewDevice, for the simulated driver).
// Errors wrap the driver's syscall.Errno.
type Device interface {
	AllocService(desc uapi.SvcDesc) (id uint32, fail uapi.FailInfo, err error)
	DestroyService(id uint32) error
	ListServices() ([]uapi.SvcDesc, error)
	GetService(id uint32) (uapi.SvcDesc, error)
	EnableService(id uint32, enable bool) error
	SetNetns(id, inode uint32) error
	GetNetns(id uint32) (uint32, error)
	GetVNIRange(id uint32) (vniMin, vniMax uint32, err error)
}

// DefaultDestroyRetry is the policy [Client.Destroy] retries EBUSY with
// unless [WithDestroyRetry] says otherwise: 8 attempts, 250 ms doubling to
// at most 5 s, 20 % jitter; about 18 s in all. Slurm tries 5 times 1 s
// apart; LNIs of a killed process can take longer to go.
func DefaultDestroyRetry() backoff.Policy {
	return backoff.Policy{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Factor: 2, Jitter: 0.2, Attempts: 8}
}

// Client manages the services of one CXI device. It is safe for
// concurrent use when its Device is (*uapi.Device is).
type Client struct {
	dev    Device
	log    *slog.Logger
	retry  backoff.Policy
	limits Limits
	// limitsSet reports that WithDefaultLimits chose limits.
	limitsSet bool
	// maxima are the NIC's own maxima by uapi.RsrcType, from
	// WithDeviceMaxima; 0 where unknown.
	maxima [uapi.NumRsrcTypes]uint16
	// warned holds the last limits that within lowered and warned about.
	warned atomic.Pointer[Limits]
	// fitMu orders the fitted creates (ServiceSpec.Fit): check, then
	// allocate, one at a time.
	fitMu sync.Mutex
}

// Option configures a Client.
type Option func(*Client)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option {
	return func(c *Client) {
		if l != nil {
			c.log = l
		}
	}
}

// WithDestroyRetry sets the retry policy for EBUSY on destroy.
func WithDestroyRetry(p backoff.Policy) Option {
	return func(c *Client) { c.retry = p }
}

// WithDefaultLimits sets the limits of specs that have none (default
// [DefaultLimits], or the NIC's maxima with [WithDeviceMaxima]).
func WithDefaultLimits(l Limits) Option {
	return func(c *Client) { c.limits, c.limitsSet = l, true }
}

// NewClient returns a Client for dev. The caller keeps ownership of dev.
func NewClient(dev Device, opts ...Option) *Client {
	c := &Client{
		dev:    dev,
		log:    slog.New(slog.DiscardHandler),
		retry:  DefaultDestroyRetry(),
		limits: DefaultLimits(),
	}
	for _, o := range opts {
		o(c)
	}
	c.applyMaxima()
	return c
}

// Create creates a service for spec and returns it as the driver reports
// it, enabled. A netns member is admitted the way the driver requires:
// allocate with no members, disable, SVC_SET_NETNS, enable; if any step
// after the allocation fails, Create destroys the service before it
// returns the error. ctx is checked before the driver is called; once
// begun, the sequence runs to success or cleanup.
//
// Errors wrap ErrInvalidSpec (nothing was sent), or are a *FitError
// matching ErrNoRoom and ErrNoResources (a spec with Fit whose
// reservations or pools do not fit; nothing was sent), or an *AllocError
// matching ErrNoResources (ENOSPC, with the driver's fail info), or wrap
// ErrExists (EEXIST: a VNI in another service's VNI range, then as a
// *ConflictError naming that service, or the netns already admitted), or
// wrap the driver's errno (EPERM without CAP_SYS_ADMIN or on a VF).
func (c *Client) Create(ctx context.Context, spec ServiceSpec) (Service, error) {
	if err := spec.Validate(); err != nil {
		return Service{}, err
	}
	if err := ctx.Err(); err != nil {
		return Service{}, err
	}
	id, err := c.allocate(ctx, spec)
	if err != nil {
		return Service{}, fmt.Errorf("create service: %w", err)
	}
	svc, err := c.finish(id, spec)
	if err != nil {
		return Service{}, fmt.Errorf("create service: %w", c.undo(id, err))
	}
	c.log.Debug("created CXI service", "svc_id", id, "vnis", svc.VNIs, "members", spec.Members, "tcs", spec.TCs.String())
	return svc, nil
}

// allocate sends SVC_ALLOC for spec with its limits and explains a
// refusal: ENOSPC as an *AllocError, EEXIST as a *ConflictError.
func (c *Client) allocate(ctx context.Context, spec ServiceSpec) (uint32, error) {
	limits := c.limits
	if spec.Limits != nil {
		limits = c.within(*spec.Limits)
	}
	if spec.Fit != nil {
		// Checked and allocated under one lock: two fitted specs are never
		// checked against the same free resources (reserve.go).
		c.fitMu.Lock()
		defer c.fitMu.Unlock()
		l, err := c.fit(ctx, spec)
		if err != nil {
			return 0, err
		}
		limits = l
	}
	id, fail, err := c.dev.AllocService(spec.desc(limits))
	switch {
	case err == nil:
		return id, nil
	case errors.Is(err, syscall.ENOSPC):
		return 0, &AllocError{Fail: fail, Err: err}
	case errors.Is(err, syscall.EEXIST):
		return 0, c.conflict(ctx, spec.VNIs, err)
	}
	return 0, classify(err)
}

// undo destroys service id, whose creation failed after its allocation
// with err, and returns err with the destroy's failure if any.
func (c *Client) undo(id uint32, err error) error {
	err = classify(err)
	if derr := c.dev.DestroyService(id); derr != nil {
		c.log.Warn("cannot destroy half-created CXI service", "svc_id", id, "err", derr)
		err = errors.Join(err, fmt.Errorf("destroy half-created service %d: %w", id, derr))
	}
	return err
}

// finish admits the netns member, if any, and reads the service back.
func (c *Client) finish(id uint32, spec ServiceSpec) (Service, error) {
	if inode, ok := spec.netns(); ok {
		if err := c.dev.EnableService(id, false); err != nil {
			return Service{}, fmt.Errorf("disable service %d: %w", id, err)
		}
		if err := c.dev.SetNetns(id, inode); err != nil {
			return Service{}, fmt.Errorf("admit netns %d to service %d: %w", inode, id, err)
		}
		if err := c.dev.EnableService(id, true); err != nil {
			return Service{}, fmt.Errorf("enable service %d: %w", id, err)
		}
	}
	svc, err := c.get(id)
	if err != nil {
		return Service{}, err
	}
	if !svc.Enabled {
		return Service{}, fmt.Errorf("service %d is not enabled after creation: %w", id, syscall.EIO)
	}
	return svc, nil
}

// Destroy destroys service id, retrying while it is busy (EBUSY) with the
// client's bounded backoff. It returns an error wrapping ErrBusy when the
// service stayed busy (with ctx's error too if ctx ended first),
// ErrNotFound when there is no such service, ErrDefaultService for the
// default service, or the driver's errno.
func (c *Client) Destroy(ctx context.Context, id uint32) error {
	switch id {
	case DefaultServiceID:
		return fmt.Errorf("destroy service %d: %w", id, ErrDefaultService)
	case 0:
		return fmt.Errorf("destroy service 0: %w", ErrNotFound)
	}
	attempt := 0
	err := c.retry.Do(ctx, func(context.Context) error {
		attempt++
		err := c.dev.DestroyService(id)
		if errors.Is(err, syscall.EBUSY) {
			c.log.Debug("CXI service busy, will retry destroy", "svc_id", id, "attempt", attempt)
			return err
		}
		return backoff.Permanent(err)
	})
	switch {
	case err == nil:
		c.log.Debug("destroyed CXI service", "svc_id", id)
		return nil
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("destroy service %d: %w: %w", id, ErrBusy, err)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("destroy service %d: %w: %w", id, ErrNotFound, err)
	}
	return fmt.Errorf("destroy service %d: %w", id, err)
}

// List returns every service of the device, the default one included, in
// ID order, with netns members read back with SVC_GET_NETNS. ctx is
// checked between services.
func (c *Client) List(ctx context.Context) ([]Service, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	descs, err := c.dev.ListServices()
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	out := make([]Service, 0, len(descs))
	for _, d := range descs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		svc, err := c.complete(d)
		if err != nil {
			return nil, fmt.Errorf("list services: %w", err)
		}
		out = append(out, svc)
	}
	return out, nil
}

// Get returns service id. The error wraps ErrNotFound when there is none.
func (c *Client) Get(ctx context.Context, id uint32) (Service, error) {
	if err := ctx.Err(); err != nil {
		return Service{}, err
	}
	return c.get(id)
}

func (c *Client) get(id uint32) (Service, error) {
	d, err := c.dev.GetService(id)
	if err != nil {
		if errors.Is(err, syscall.EINVAL) {
			return Service{}, fmt.Errorf("get service %d: %w: %w", id, ErrNotFound, err)
		}
		return Service{}, fmt.Errorf("get service %d: %w", id, err)
	}
	svc, err := c.complete(d)
	if err != nil {
		return Service{}, fmt.Errorf("get service %d: %w", id, err)
	}
	return svc, nil
}

// conflict explains an EEXIST from SVC_ALLOC: the services whose VNI
// range holds one of vnis. The list is read after the refusal, so it may
// have changed since; the error then names none. It lists even when ctx
// has ended since the refusal: the driver answers at once, and the error
// is worth more with the name.
func (c *Client) conflict(ctx context.Context, vnis []uint16, err error) *ConflictError {
	ce := &ConflictError{VNIs: slices.Clone(vnis), Err: err}
	svcs, lerr := c.List(context.WithoutCancel(ctx))
	if lerr != nil {
		ce.ListErr = lerr
		return ce
	}
	for _, s := range svcs {
		if slices.ContainsFunc(vnis, s.BlocksVNI) {
			ce.Conflicts = append(ce.Conflicts, s)
		}
	}
	return ce
}

// complete converts a descriptor and adds its netns member and VNI range.
func (c *Client) complete(d uapi.SvcDesc) (Service, error) {
	svc := serviceFrom(d)
	if !d.RestrictedVNIs && d.NumVldVNIs > 0 {
		lo, hi, err := c.dev.GetVNIRange(d.SvcID)
		switch {
		case err == nil && lo <= hi && hi <= 0xffff:
			svc.VNIRange = &VNIRange{Min: uint16(lo), Max: uint16(hi)}
		case err == nil, errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOENT):
			// No range (setting it failed), or the service is gone.
		default:
			return Service{}, fmt.Errorf("read VNI range of service %d: %w", d.SvcID, err)
		}
	}
	if !mayHaveNetns(d) {
		return svc, nil
	}
	inode, err := c.dev.GetNetns(d.SvcID)
	switch {
	case err == nil:
		svc.Members = append(svc.Members, Member{Type: MemberNetNS, ID: inode})
	case errors.Is(err, syscall.EINVAL):
		// No netns member (or the service is gone since it was listed).
	default:
		return Service{}, fmt.Errorf("read netns of service %d: %w", d.SvcID, err)
	}
	return svc, nil
}
