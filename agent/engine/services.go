package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/cxi"
)

// Driver is what the engine needs of one NIC's CXI services; *cxi.Client
// is one.
type Driver interface {
	Create(ctx context.Context, spec cxi.ServiceSpec) (cxi.Service, error)
	CreateUnbound(ctx context.Context, spec cxi.ServiceSpec) (cxi.Service, error)
	Bind(ctx context.Context, id, inode uint32) (cxi.Service, error)
	Destroy(ctx context.Context, id uint32) error
	Get(ctx context.Context, id uint32) (cxi.Service, error)
	List(ctx context.Context) ([]cxi.Service, error)
}

// NICSet names the drivers of the node's NICs.
type NICSet interface {
	// Driver returns nic's driver; false for a NIC not served.
	Driver(nic string) (Driver, bool)
	// Names are the NICs, sorted.
	Names() []string
}

// DriverMap is a fixed NICSet.
type DriverMap map[string]Driver

func (m DriverMap) Driver(nic string) (Driver, bool) { d, ok := m[nic]; return d, ok }

func (m DriverMap) Names() []string { return slices.Sorted(maps.Keys(m)) }

// Metrics are the engine's series, counted the same whichever front end
// asked, so that an alert on them means the same in both modes. A nil
// field counts nothing.
type Metrics struct {
	// ServiceErrors counts failed service operations by NIC and op
	// (create, create_conflict, bind, destroy).
	ServiceErrors *prometheus.CounterVec
	// Stuck counts destroys still busy (EBUSY) after a whole round of
	// retries.
	Stuck prometheus.Counter
	// Teardown observes, in seconds, the time from a holder's teardown
	// beginning (its record's Exited) to its record gone: services
	// destroyed, lease released.
	Teardown prometheus.Observer
	// HSNErrors counts the failed steps of holders' hsn interfaces, by op
	// (allocate, attach, detach, release).
	HSNErrors *prometheus.CounterVec
}

// Fabric is the node's NICs as the engine drives them: the one place in
// the agent that creates, binds or destroys a CXI service. Every service
// is made unbound (disabled, admitting nobody) and bound later to a
// namespace its caller verified; the driver cannot take a member back, so
// a service that must admit another namespace is replaced ([Fabric.Renew]).
// Safe for concurrent use; it holds no lock of its own.
type Fabric struct {
	nics NICSet
	m    Metrics
	log  *slog.Logger
	// reused is told of a service ID the driver has just handed out: a
	// record still naming it names a destroyed service
	// (checkpoint.Store.ForgetReused). Nil: nothing to tell.
	reused func(nic string, id uint32) []string
}

// NewFabric drives nics (by NIC name), counting into m and telling reused
// (may be nil) of each new service's ID.
func NewFabric(nics NICSet, m Metrics, reused func(nic string, id uint32) []string, log *slog.Logger) *Fabric {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fabric{nics: nics, m: m, reused: reused, log: log}
}

// NICs are the fabric's NIC names, sorted.
func (f *Fabric) NICs() []string { return f.nics.Names() }

func (f *Fabric) count(nic, op string) {
	if f.m.ServiceErrors != nil {
		f.m.ServiceErrors.WithLabelValues(nic, op).Inc()
	}
}

func (f *Fabric) driver(nic string) (Driver, error) {
	d, ok := f.nics.Driver(nic)
	if !ok {
		return nil, fmt.Errorf("NIC %s is not served on this node", nic)
	}
	return d, nil
}

// Create makes a service for spec on nic and returns its ID: unbound
// (disabled, admitting nobody) when spec names no member, which is how
// every service whose member is a namespace starts; with spec's members
// only for the configured fallback UID or GID member
// (membership.fallbackUID), which has no namespace to verify. A failure
// is counted: create_conflict when another service's VNI range holds the
// VNI (retrying cannot help until its owner removes it), create
// otherwise.
func (f *Fabric) Create(ctx context.Context, nic string, spec cxi.ServiceSpec) (uint32, error) {
	d, err := f.driver(nic)
	if err != nil {
		return 0, err
	}
	var svc cxi.Service
	if len(spec.Members) == 0 {
		svc, err = d.CreateUnbound(ctx, spec)
	} else if slices.ContainsFunc(spec.Members, func(m cxi.Member) bool { return m.Type == cxi.MemberNetNS }) {
		err = fmt.Errorf("%w: a namespace member is admitted by Bind, once verified", cxi.ErrInvalidSpec)
	} else {
		svc, err = d.Create(ctx, spec)
	}
	if err != nil {
		op := "create"
		if _, ok := errors.AsType[*cxi.ConflictError](err); ok {
			op = "create_conflict"
		}
		f.count(nic, op)
		return 0, fmt.Errorf("create service on %s: %w", nic, err)
	}
	if f.reused != nil {
		if stale := f.reused(nic, svc.ID); len(stale) > 0 {
			f.log.Info("the driver reused a destroyed service's ID; its old record entry goes", "nic", nic, "id", svc.ID, "records", stale)
		}
	}
	return svc.ID, nil
}

// Destroy destroys service id on nic, retrying while it is busy (the
// driver client's bounded rounds). A service already gone, or on a NIC
// no longer present, counts as destroyed. One still busy after the
// retries is counted stuck; the caller keeps it recorded and retries.
func (f *Fabric) Destroy(ctx context.Context, nic string, id uint32) error {
	d, ok := f.nics.Driver(nic)
	if !ok {
		f.log.Warn("service on a NIC that is no longer present; forgetting it", "nic", nic, "id", id)
		return nil
	}
	err := d.Destroy(ctx, id)
	switch {
	case err == nil, errors.Is(err, cxi.ErrNotFound):
		return nil
	case errors.Is(err, cxi.ErrBusy):
		if f.m.Stuck != nil {
			f.m.Stuck.Inc()
		}
	default:
		f.count(nic, "destroy")
	}
	return fmt.Errorf("destroy service %d on %s: %w", id, nic, err)
}

// Renew replaces service id on nic by a new unbound one made from spec:
// the driver cannot drop a member, so this is how a service stops
// admitting a namespace. The old one is destroyed first, so that it
// admits nobody once Renew returns without error; it returns the new ID.
func (f *Fabric) Renew(ctx context.Context, nic string, id uint32, spec cxi.ServiceSpec) (uint32, error) {
	if err := f.Destroy(ctx, nic, id); err != nil {
		return 0, fmt.Errorf("replace service %d on %s: %w", id, nic, err)
	}
	return f.Create(ctx, nic, spec)
}

// Target is one service to bind.
type Target struct {
	NIC string
	ID  uint32
}

// Bind admits the namespace h holds to each target's service, in order,
// and enables it. It takes h: a service may admit h's namespace from the
// first bind attempt on (the driver can take the member and then fail to
// enable), and the driver cannot take it back, so h is kept for holder
// in ns, replacing the handle kept before, until the holder's services
// are destroyed or renewed; with no target h is closed at once. It
// returns how many targets were bound (the first n) and the error of the
// one that failed, which may admit the namespace too.
func (f *Fabric) Bind(ctx context.Context, ns *Namespaces, holder string, h Handle, targets []Target) (int, error) {
	if len(targets) == 0 {
		_ = h.Close()
		return 0, nil
	}
	ns.Keep(holder, h)
	for i, t := range targets {
		d, err := f.driver(t.NIC)
		if err == nil {
			_, err = d.Bind(ctx, t.ID, h.Inode())
		}
		if err != nil {
			f.count(t.NIC, "bind")
			return i, fmt.Errorf("bind service %d on %s: %w", t.ID, t.NIC, err)
		}
	}
	return len(targets), nil
}

// Get reads service id on nic as the driver has it now.
func (f *Fabric) Get(ctx context.Context, nic string, id uint32) (cxi.Service, error) {
	d, err := f.driver(nic)
	if err != nil {
		return cxi.Service{}, err
	}
	return d.Get(ctx, id)
}

// List lists nic's services, the system's included.
func (f *Fabric) List(ctx context.Context, nic string) ([]cxi.Service, error) {
	d, err := f.driver(nic)
	if err != nil {
		return nil, err
	}
	svcs, err := d.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list services on %s: %w", nic, err)
	}
	return svcs, nil
}

// Listing is every NIC's services as one listing showed them, by NIC.
type Listing map[string][]cxi.Service

// ListAll lists every NIC's services; one NIC that cannot be listed fails
// it all, since a listing with a NIC missing proves nothing of it.
func (f *Fabric) ListAll(ctx context.Context) (Listing, error) {
	out := Listing{}
	for _, name := range f.NICs() {
		svcs, err := f.List(ctx, name)
		if err != nil {
			return nil, err
		}
		out[name] = svcs
	}
	return out, nil
}

// Lost reports whether service id on nic, recorded for a holder whose
// services carry vnis, is gone from the driver as l shows it: absent, or
// carrying another's VNIs under the same ID (the driver hands a lost
// service's ID to the next service made). A NIC l does not list (one no
// longer served) proves nothing, and nothing on it is lost. A start
// forgets every lost service before it makes any, or a record naming a
// lost ID would name another holder's new service.
func (l Listing) Lost(nic string, id uint32, vnis []uint16) bool {
	listed, ok := l[nic]
	if !ok {
		return false
	}
	i := slices.IndexFunc(listed, func(d cxi.Service) bool { return d.ID == id })
	return i < 0 || !CarriesAll(listed[i].VNIs, vnis)
}

// CheckBound reports, as the driver says now, whether service id on nic
// is enabled, admits the namespace inode alone and carries vni: what a
// container must find before it starts. The error says what differs.
func (f *Fabric) CheckBound(ctx context.Context, nic string, id, inode uint32, vni uint16) error {
	svc, err := f.Get(ctx, nic, id)
	if err != nil {
		return fmt.Errorf("service %d on %s: %w", id, nic, err)
	}
	if !Admits(svc, inode) || !slices.Contains(svc.VNIs, vni) {
		return fmt.Errorf("service %d on %s is enabled=%v with members %v and VNIs %v, want enabled with netns %d alone and VNI %d",
			id, nic, svc.Enabled, svc.Members, svc.VNIs, inode, vni)
	}
	return nil
}

// Admits reports whether svc is enabled and admits the namespace inode
// alone.
func Admits(svc cxi.Service, inode uint32) bool {
	return svc.Enabled && svc.RestrictedMembers && slices.Equal(svc.Members, []cxi.Member{{Type: cxi.MemberNetNS, ID: inode}})
}

// Unbound reports whether svc admits nobody: disabled, restricted to
// members, with none.
func Unbound(svc cxi.Service) bool {
	return !svc.Enabled && svc.RestrictedMembers && len(svc.Members) == 0
}
