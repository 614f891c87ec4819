package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/internal/keylock"
)

// Config is what an [Engine] is made of.
type Config struct {
	// Node is the node's name, for the events told on it.
	Node string
	// Store is the durable record; the engine alone changes it.
	Store *checkpoint.Store
	// NICs are the node's NICs by name, which only the engine drives.
	NICs NICSet
	// Leaser leases the holders' VNIs from the controller.
	Leaser Leaser
	// Metrics are counted the same whichever front end asked.
	Metrics Metrics
	// Pins, when set, pins every namespace a service admits, so that the
	// hold outlives the agent.
	Pins Pinner
	// Defaults are the node's service defaults as configured now.
	Defaults func() Defaults
	// Addrs allocates the hsn interfaces' addresses (nil: the node has no
	// IPAM, and no holder gets one); Linker puts the interfaces in place
	// (nil: netlink).
	Addrs  AddressAllocator
	Linker Linker
	// Events tell the pods and the node what only the log would know;
	// nil: nobody.
	Events event.Recorder
	Log    *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Engine is a holder's whole life on the node's fabric, whichever front
// end the holder came through (a pod of the device plugin, a DRA claim):
// its lease, a service per NIC (made unbound, bound to a namespace its
// caller verified, enabled), the namespace hold, the durable record, the
// rollback of a bind that failed, the check a container must pass, the
// unbind, the teardown, and the reconcile at start. It is the only code
// in the agent that creates, binds or destroys a CXI service, and it
// changes the record only as a step of one of those.
//
// The steps of one holder are ordered by its lock ([Engine.Lock]): a
// method on a holder expects its caller to hold it. No lock is held
// across a call to the controller but the holder's own.
type Engine struct {
	node      string
	teardown  prometheus.Observer // nil: not measured
	store     *checkpoint.Store
	fab       *Fabric
	leases    *Leases
	ns        *Namespaces
	defaults  func() Defaults
	addrs     AddressAllocator
	linker    Linker
	hsnErrors *prometheus.CounterVec
	events    event.Recorder
	log       *slog.Logger
	now       func() time.Time
	locks     keylock.Set
}

// New returns the engine of the holders recorded in cfg.Store, counting
// them as the holders of their leases.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil || cfg.NICs == nil || cfg.Leaser == nil || cfg.Defaults == nil {
		return nil, errors.New("engine: Store, NICs, Leaser and Defaults are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Events == nil {
		cfg.Events = event.Nop{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Linker == nil {
		cfg.Linker = NetlinkLinker{}
	}
	e := &Engine{
		addrs: cfg.Addrs, linker: cfg.Linker, hsnErrors: cfg.Metrics.HSNErrors,
		node: cfg.Node, store: cfg.Store, leases: NewLeases(cfg.Leaser),
		ns:       &Namespaces{Pins: cfg.Pins, Log: cfg.Log},
		defaults: cfg.Defaults, events: cfg.Events, log: cfg.Log, now: cfg.Now, teardown: cfg.Metrics.Teardown,
	}
	e.fab = NewFabric(cfg.NICs, cfg.Metrics, cfg.Store.ForgetReused, cfg.Log)
	for _, h := range cfg.Store.All() {
		if !h.Released {
			e.leases.Restore(h.LeaseKey, h.ID())
		}
	}
	return e, nil
}

// Lock takes holder id's lock and returns its release.
func (e *Engine) Lock(id string) func() { return e.locks.Lock(id) }

// Get returns a copy of holder id's record.
func (e *Engine) Get(id string) (checkpoint.Holder, bool) { return e.store.Get(id) }

// All returns copies of every record, pods' and claims'.
func (e *Engine) All() []checkpoint.Holder { return e.store.All() }

// Holders returns copies of the records of kind.
func (e *Engine) Holders(kind checkpoint.Kind) []checkpoint.Holder { return e.store.Holders(kind) }

// Leases are the node's lease holds.
func (e *Engine) Leases() *Leases { return e.leases }

// Namespaces are the namespaces held for the holders.
func (e *Engine) Namespaces() *Namespaces { return e.ns }

// NICs are the names of the NICs the engine drives.
func (e *Engine) NICs() []string { return e.fab.NICs() }

// Save writes the record durably (the store counts a failure).
func (e *Engine) Save() error { return e.store.Save() }

// Update changes holder id's record in memory, for the front end's own
// fields. A change that breaks the store's rules is not made.
func (e *Engine) Update(id string, change func(*checkpoint.Holder)) (checkpoint.Holder, error) {
	h, _, err := e.store.Update(id, change)
	if err != nil {
		return h, fmt.Errorf("record of %s: %w", id, err)
	}
	return h, nil
}

// Admit leases the VNI of a holder seen for the first time (with the
// network request the controller passed on with it) and records it
// durably, before any service exists, so that a crash leaves nothing a
// restart cannot recognise. A holder of a job another local holder holds
// the lease of joins it with no controller call (share, [ShareKey]).
// Nothing is left held when it fails.
func (e *Engine) Admit(ctx context.Context, h checkpoint.Holder, pod controllerclient.PodRef, share string) (checkpoint.Holder, error) {
	return e.admit(ctx, h, pod, share, true)
}

// AdmitToBind is Admit for a holder whose namespace the same request
// binds: its record becomes durable with [Engine.Bind]'s save, which comes
// before any service may admit the namespace, one disk flush fewer per pod
// start. A crash before that save leaves services made unbound, which
// the start-up reconcile destroys ([Engine.Orphans]), and the node's hold
// at the controller, which the controller drops once the node's reports
// of its VNIs in use lack the VNI (controller.ReportVNIsInUse).
func (e *Engine) AdmitToBind(ctx context.Context, h checkpoint.Holder, pod controllerclient.PodRef, share string) (checkpoint.Holder, error) {
	return e.admit(ctx, h, pod, share, false)
}

func (e *Engine) admit(ctx context.Context, h checkpoint.Holder, pod controllerclient.PodRef, share string, durable bool) (checkpoint.Holder, error) {
	id := h.ID()
	lease, err := e.leases.AcquireShared(ctx, id, pod, share)
	if err != nil {
		return h, fmt.Errorf("lease VNI for %s: %w", h.String(), err)
	}
	h.VNI, h.Scope, h.LeaseKey, h.Local = lease.VNI, string(lease.Scope), lease.Key, lease.Local
	h.CollEnv = CollectivesEnv(lease)
	h.Network = lease.NetworkRequest
	h.Created = e.now().UTC()
	if err := e.store.Put(h); err != nil {
		e.release(ctx, h)
		return h, fmt.Errorf("record %s: %w", h.String(), err)
	}
	if !durable {
		return h, nil
	}
	if err := e.store.Save(); err != nil {
		if e.release(ctx, h) {
			e.store.Delete(id)
		}
		return h, err
	}
	return h, nil
}

// leaseOf is the lease h holds.
func leaseOf(h checkpoint.Holder) controllerclient.Lease {
	return controllerclient.Lease{Key: h.LeaseKey, VNI: h.VNI, Scope: controllerclient.Scope(h.Scope), Local: h.Local}
}

// release drops h's hold on its lease, and the node's hold at the
// controller with the last local holder, and marks the record released.
// It reports whether the lease no longer needs releasing; a failure is
// told on the holder's pod and retried by the next teardown.
func (e *Engine) release(ctx context.Context, h checkpoint.Holder) bool {
	if h.Released {
		return true
	}
	if err := e.leases.Release(ctx, h.ID(), leaseOf(h)); err != nil {
		e.log.Warn("release VNI; will retry", "holder", h.String(), "vni", h.VNI, "err", err)
		e.events.Record(e.subject(h), event.LeaseReleaseFailed,
			fmt.Sprintf("Releasing this node's hold on VNI %d of %s failed: %v", h.VNI, h.String(), err))
		return false
	}
	if _, err := e.Update(h.ID(), func(r *checkpoint.Holder) { r.Released = true }); err != nil {
		// The hold is given up all the same; a restart that reads the
		// record unreleased releases it again, which the controller takes.
		e.log.Error("mark a released lease in the record", "holder", h.String(), "err", err)
	}
	return true
}

// subject is whom an event about h is told on: its pod (a claim's bound
// or first reserved pod), or the node where it has none.
func (e *Engine) subject(h checkpoint.Holder) event.Object {
	if h.Kind == checkpoint.KindPod {
		return event.Pod(h.Namespace, h.Name, h.UID)
	}
	for _, p := range h.Pods {
		if h.BoundPod == "" || p.UID == h.BoundPod {
			return event.Pod(p.Namespace, p.Name, p.UID)
		}
	}
	return event.Node(e.node)
}

// Spec is the spec of holder h's services, from its own options.
func (e *Engine) Spec(h checkpoint.Holder) (cxi.ServiceSpec, error) {
	spec, err := ServiceSpec(h.VNI, h.Options, e.defaults())
	if err != nil {
		return spec, fmt.Errorf("services of %s: %w", h.String(), err)
	}
	return spec, nil
}

// Ensure makes sure holder id has a service on each of nics carrying its
// VNIs, and returns the services it made. A recorded service is kept when
// the driver has it unbound, or admitting the one namespace its record
// names (or, with a fallback member, enabled with that member alone); any
// other is destroyed and made again. New services are made unbound, or
// with the fallback UID or GID member where the holder's namespace cannot
// be known (fallback non-nil). A holder with no VNI gets none.
func (e *Engine) Ensure(ctx context.Context, id string, nics []string, fallback *cxi.Member) ([]checkpoint.Service, error) {
	h, ok := e.store.Get(id)
	if !ok || h.VNI == 0 {
		return nil, nil
	}
	vnis := h.Options.VNIs(h.VNI)
	var missing []string
	for _, nic := range nics {
		s, ok := h.Service(nic)
		if ok {
			keep, err := e.keep(ctx, s, vnis, fallback)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", h.String(), err)
			}
			if keep {
				continue
			}
			if h, err = e.Update(id, func(r *checkpoint.Holder) { r.Services = slices.DeleteFunc(r.Services, sameService(s)) }); err != nil {
				return nil, err
			}
		}
		missing = append(missing, nic)
	}
	spec, err := e.Spec(h)
	if err != nil {
		return nil, err
	}
	if fallback != nil {
		spec.Members = []cxi.Member{*fallback}
	}
	var created []checkpoint.Service
	for _, nic := range missing {
		s, err := e.create(ctx, id, nic, spec)
		if err != nil {
			return created, fmt.Errorf("services of %s: %w", h.String(), err)
		}
		created = append(created, s)
	}
	return created, nil
}

// keep reads recorded service s and tells whether it can stay (see
// Ensure); one that cannot is destroyed first.
func (e *Engine) keep(ctx context.Context, s checkpoint.Service, vnis []uint16, fallback *cxi.Member) (bool, error) {
	svc, err := e.fab.Get(ctx, s.NIC, s.ID)
	switch {
	case errors.Is(err, cxi.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("check service %d on %s: %w", s.ID, s.NIC, err)
	case !CarriesAll(svc.VNIs, vnis):
	case fallback != nil && svc.Enabled && slices.Equal(svc.Members, []cxi.Member{*fallback}):
		return true, nil
	case fallback == nil && (Unbound(svc) || s.Netns != 0 && Admits(svc, s.Netns)):
		return true, nil
	}
	e.log.Warn("a recorded service is not as its record says; it is made again", "nic", s.NIC, "id", s.ID, "vnis", svc.VNIs, "members", svc.Members, "enabled", svc.Enabled)
	if err := e.fab.Destroy(ctx, s.NIC, s.ID); err != nil {
		return false, fmt.Errorf("replace a stale service: %w", err)
	}
	return false, nil
}

// create makes a service on nic for holder id and records it; one that
// cannot be recorded is destroyed at once, since unrecorded it would be
// nobody's.
func (e *Engine) create(ctx context.Context, id, nic string, spec cxi.ServiceSpec) (checkpoint.Service, error) {
	sid, err := e.fab.Create(ctx, nic, spec)
	if err != nil {
		return checkpoint.Service{}, err
	}
	s := checkpoint.Service{NIC: nic, ID: sid, VNIs: slices.Clone(spec.VNIs)}
	if _, err := e.Update(id, func(r *checkpoint.Holder) { r.Services = append(r.Services, s) }); err != nil {
		if derr := e.fab.Destroy(ctx, nic, sid); derr != nil {
			err = fmt.Errorf("%w; and destroying the unrecorded service: %w (the start-up reconcile destroys it)", err, derr)
		}
		return s, err
	}
	return s, nil
}

func sameService(s checkpoint.Service) func(checkpoint.Service) bool {
	return func(x checkpoint.Service) bool { return x.Is(s.NIC, s.ID) }
}

// Bind admits the namespace ns holds to every service of holder id and
// enables them. Services that admit another namespace (a sandbox made
// again) are replaced by unbound ones first, since the driver cannot drop
// a member; those admitting ns already are left as they are. The record
// names the namespace, and is saved, before any service may admit it
// (mark, when set, changes the front end's own fields in the same step):
// a crash mid-bind leaves a record that a restart verifies, never a
// service admitting a namespace no record names. The engine keeps ns from
// here while a service may admit it. A bind that fails part-way is
// undone: every service that may admit the namespace goes back to
// unbound. It reports whether any service was replaced (the holder's
// environment must name the new IDs).
func (e *Engine) Bind(ctx context.Context, id string, ns Handle, mark func(*checkpoint.Holder)) (replaced bool, err error) {
	inode := ns.Inode()
	h, ok := e.store.Get(id)
	if !ok {
		_ = ns.Close()
		return false, fmt.Errorf("%s is not recorded", id)
	}
	for _, s := range h.Services {
		if s.Netns != 0 && s.Netns != inode {
			if err := e.renew(ctx, id, s); err != nil {
				_ = ns.Close()
				return replaced, fmt.Errorf("%s: %w", h.String(), errors.Join(err, e.Save()))
			}
			replaced = true
		}
	}
	if replaced && e.ns.Held(id) != inode {
		// No service names the old namespace now: its hold may go.
		e.ns.Release(id)
	}
	h, _ = e.store.Get(id)
	targets := e.unboundOf(ctx, h, inode)
	h, err = e.Update(id, func(r *checkpoint.Holder) {
		r.Netns = inode
		for i := range r.Services {
			r.Services[i].Netns = inode
		}
		if mark != nil {
			mark(r)
		}
	})
	if err == nil {
		err = e.Save()
	}
	if err != nil {
		_ = ns.Close()
		return replaced, errors.Join(err, e.Unbind(ctx, id, inode))
	}
	if len(targets) == 0 && len(h.Services) > 0 {
		e.ns.Keep(id, ns) // bound already: hold it again
	} else if _, err := e.fab.Bind(ctx, e.ns, id, ns, targets); err != nil {
		return replaced, fmt.Errorf("%s: %w", h.String(), errors.Join(err, e.Unbind(ctx, id, inode)))
	}
	return replaced, nil
}

// unboundOf are h's services still to bind to inode: those recorded
// unbound, and those recorded as admitting it that the driver does not
// show bound (a bind the agent's crash interrupted after its record was
// written).
func (e *Engine) unboundOf(ctx context.Context, h checkpoint.Holder, inode uint32) []Target {
	var out []Target
	for _, s := range h.Services {
		if s.Netns == inode {
			if svc, err := e.fab.Get(ctx, s.NIC, s.ID); err == nil && Admits(svc, inode) {
				continue
			}
		}
		out = append(out, Target{NIC: s.NIC, ID: s.ID})
	}
	return out
}

// renew replaces recorded service s of holder id by an unbound one on the
// same NIC, recording each step: after it, s admits nobody. A service
// that cannot be made again leaves the holder without one on that NIC;
// its containers are refused until a bind or the reconcile makes it.
func (e *Engine) renew(ctx context.Context, id string, s checkpoint.Service) error {
	if err := e.fab.Destroy(ctx, s.NIC, s.ID); err != nil {
		return fmt.Errorf("replace a service: %w", err)
	}
	h, err := e.Update(id, func(r *checkpoint.Holder) { r.Services = slices.DeleteFunc(r.Services, sameService(s)) })
	if err != nil {
		return err
	}
	spec, err := e.Spec(h)
	if err != nil {
		return err
	}
	_, err = e.create(ctx, id, s.NIC, spec)
	return err
}

// Unbind makes every service of holder id that may admit the namespace
// inode (every bound one, for inode 0) unbound again, on the same VNIs,
// recording each step and saving; once none admits it, the namespace is
// let go and the record names none. What cannot be replaced stays
// recorded as admitting it, with the namespace held, until the next bind
// or the teardown replaces or destroys it.
func (e *Engine) Unbind(ctx context.Context, id string, inode uint32) error {
	h, ok := e.store.Get(id)
	if !ok {
		return nil
	}
	admits := func(s checkpoint.Service) bool { return s.Netns != 0 && (inode == 0 || s.Netns == inode) }
	var errs []error
	for _, s := range h.Services {
		if admits(s) {
			errs = append(errs, e.renew(ctx, id, s))
		}
	}
	if h, ok = e.store.Get(id); ok && !slices.ContainsFunc(h.Services, func(s checkpoint.Service) bool { return s.Netns != 0 }) {
		if _, err := e.Update(id, func(r *checkpoint.Holder) { r.Netns, r.BoundPod, r.BoundNetns = 0, "", "" }); err != nil {
			errs = append(errs, err)
		} else {
			e.ns.Release(id)
		}
	}
	errs = append(errs, e.Save())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unbind the services of %s: %w", h.String(), err)
	}
	return nil
}

// Check reports, as the driver says now, whether a container of holder
// id may start in the namespace inode: a service on each of nics, each
// enabled, admitting inode alone and carrying the holder's VNI.
func (e *Engine) Check(ctx context.Context, id string, nics []string, inode uint32) error {
	h, ok := e.store.Get(id)
	if !ok {
		return fmt.Errorf("%s is not recorded on this node", id)
	}
	if h.VNI == 0 {
		return nil
	}
	for _, nic := range nics {
		s, ok := h.Service(nic)
		if !ok {
			return fmt.Errorf("%s has no service on %s", h.String(), nic)
		}
		if err := e.fab.CheckBound(ctx, s.NIC, s.ID, inode, h.VNI); err != nil {
			return fmt.Errorf("%s: %w", h.String(), err)
		}
	}
	return nil
}

// Rollback undoes a failed bind of holder id: the services made in this
// call are destroyed, and a holder seen for the first time (fresh) is
// forgotten once none is left and undo, the front end's own part, says
// it is undone, its lease released. What cannot be destroyed stays
// recorded for the teardown.
func (e *Engine) Rollback(ctx context.Context, id string, created []checkpoint.Service, fresh bool, undo func(checkpoint.Holder) bool) {
	for _, s := range created {
		if err := e.fab.Destroy(ctx, s.NIC, s.ID); err != nil {
			e.log.Error("rollback: destroy service", "holder", id, "nic", s.NIC, "id", s.ID, "err", err)
			continue
		}
		if _, err := e.Update(id, func(r *checkpoint.Holder) { r.Services = slices.DeleteFunc(r.Services, sameService(s)) }); err != nil {
			e.log.Error("rollback: drop a destroyed service from the record", "holder", id, "err", err)
		}
	}
	if h, ok := e.store.Get(id); fresh && ok && len(h.Services) == 0 && (undo == nil || undo(h)) {
		if e.release(ctx, h) {
			e.store.Delete(id)
			e.ns.Release(id)
		}
	}
	if err := e.Save(); err != nil {
		e.log.Error("rollback: save the record", "holder", id, "err", err)
	}
}

// Teardown destroys holder id's services, each destroy retried while busy
// (the driver's bounded EBUSY rounds), lets its namespace go, has undo
// remove the front end's own part (its CDI spec or files, its hsn
// interface), releases its lease and drops the record, saving each step,
// so that a later call resumes where this one stopped. It reports whether
// the record is gone; a service still busy keeps it, counted stuck, for
// the next call.
func (e *Engine) Teardown(ctx context.Context, id string, undo func(checkpoint.Holder) error) (bool, error) {
	h, ok := e.store.Get(id)
	if !ok {
		return true, nil
	}
	var errs []error
	for _, s := range h.Services {
		if err := e.fab.Destroy(ctx, s.NIC, s.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := e.Update(id, func(r *checkpoint.Holder) { r.Services = slices.DeleteFunc(r.Services, sameService(s)) }); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && undo != nil {
		h, _ = e.store.Get(id)
		errs = append(errs, undo(h))
	}
	if errors.Join(errs...) == nil {
		e.ns.Release(id) // no service names the namespace any more
		h, _ = e.store.Get(id)
		if e.release(ctx, h) {
			e.store.Delete(id)
			if e.teardown != nil && h.Exited != nil {
				e.teardown.Observe(e.now().Sub(*h.Exited).Seconds())
			}
		} else {
			errs = append(errs, fmt.Errorf("release VNI %d: the controller did not answer", h.VNI))
		}
	}
	if err := e.Save(); err != nil {
		// The node's record is behind the driver: told on the node, whose
		// record it is; the next call writes it again.
		e.events.Record(event.Node(e.node), event.RecordFailed, fmt.Sprintf("Tearing down %s: %v", h.String(), err))
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return false, fmt.Errorf("tear down %s: %w", h.String(), err)
	}
	return true, nil
}

// TCs are the traffic classes h's services have: its own, or the node's.
func (e *Engine) TCs(h checkpoint.Holder) cxi.TrafficClasses { return TCs(h.Options, e.defaults()) }

// Env is the SLINGSHOT_* environment of a container of h using nics: its
// services in NIC order (0 where a NIC has none), its VNIs and traffic
// classes, with h's claim suffix, and the job's collectives environment.
func (e *Engine) Env(h checkpoint.Holder, nics []string) []string {
	b := Binding{VNI: h.VNI, Extra: Extra(h.Options), TCs: e.TCs(h), Suffix: h.Config.EnvSuffix}
	for _, nic := range nics {
		s, _ := h.Service(nic)
		b.NICs = append(b.NICs, nic)
		b.Services = append(b.Services, s.ID)
	}
	return append(Env(b), h.CollEnv...)
}
