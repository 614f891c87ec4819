package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/hwcoll"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"github.com/slingshot-k8s/slingshot/internal/keylock"
)

// FabricManager reserves jobs' multicast addresses for hardware
// collectives; *hwcoll.Client is one. Reserve is idempotent by jobID
// (asking twice reserves once) and Release of a job with no reservation
// succeeds. Errors that [hwcoll.Temporary] accepts are retried.
type FabricManager interface {
	// Reserve returns the session token of jobID's reservation of
	// mcastLimit addresses, making it unless it exists.
	Reserve(ctx context.Context, jobID string, mcastLimit int) (token string, err error)
	// Release releases jobID's reservation.
	Release(ctx context.Context, jobID string) error
	// List returns the IDs of every reservation, whoever made it.
	List(ctx context.Context) ([]string, error)
}

// CollectivesConfig enables Slingshot hardware collectives: each job
// lease gets a reservation of multicast addresses at the fabric manager,
// made when the first node acquires the lease and released when the
// lease is freed, and the lease carries what the job's processes need to
// use it (Lease.Collectives).
type CollectivesConfig struct {
	// FM is the fabric manager. Required.
	FM FabricManager
	// JobPrefix starts every job ID the controller makes at the fabric
	// manager, "<JobPrefix>-<owner UID>", as Slurm's start with its
	// cluster name; only IDs with it are this controller's to release,
	// so each cluster sharing a fabric manager needs its own. A DNS
	// label. Required.
	JobPrefix string
	// AddrsPerJob is how many multicast addresses a job reserves
	// (FI_CXI_HWCOLL_ADDRS_PER_JOB); at least 1.
	AddrsPerJob int
	// MinNodes is the fewest nodes a collective spans for libfabric to
	// use the hardware (FI_CXI_HWCOLL_MIN_NODES); at least 1.
	MinNodes int
	// JobURL is the fabric manager's URL as the job's processes reach it;
	// FI_CXI_COLL_FABRIC_MGR_URL is it followed by
	// [hwcoll.MulticastsPath]. Required.
	JobURL string
	// Retry bounds each reserve and release; default 5 attempts from
	// 200 ms to 5 s. A release that runs out of attempts is left to the
	// next reconcile.
	Retry backoff.Policy
	// ReconcileInterval is how often the fabric manager's reservations
	// are listed and those of no lease released; default 1 min. It also
	// runs whenever the state is loaded (a start, a takeover).
	ReconcileInterval time.Duration
}

var jobPrefixRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func (c *CollectivesConfig) withDefaults() {
	if c.Retry.IsZero() {
		c.Retry = backoff.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2, Attempts: 5}
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = time.Minute
	}
}

// Validate returns the configuration's errors joined.
func (c *CollectivesConfig) Validate() error {
	var errs []error
	if c.FM == nil {
		errs = append(errs, errors.New("hardware collectives: no fabric manager"))
	}
	if !jobPrefixRE.MatchString(c.JobPrefix) {
		errs = append(errs, fmt.Errorf("hardware collectives: job prefix %q is not a DNS label", c.JobPrefix))
	}
	if c.AddrsPerJob < 1 || c.MinNodes < 1 {
		errs = append(errs, fmt.Errorf("hardware collectives: addresses per job (%d) and minimum nodes (%d) must be at least 1", c.AddrsPerJob, c.MinNodes))
	}
	if c.JobURL == "" {
		errs = append(errs, errors.New("hardware collectives: no fabric manager url for jobs"))
	}
	if c.ReconcileInterval < 0 {
		errs = append(errs, errors.New("hardware collectives: negative reconcile interval"))
	}
	return errors.Join(errs...)
}

// Collectives is a job's hardware-collectives reservation as its
// processes need it: the values of Slurm's FI_CXI_COLL_* and
// FI_CXI_HWCOLL_* variables.
type Collectives struct {
	// JobID names the reservation at the fabric manager.
	JobID string
	// JobStepID is "0": a Kubernetes job is one step.
	JobStepID string
	// Token is the reservation's session token.
	Token string
	// FabricMgrURL is where the processes ask for addresses.
	FabricMgrURL string
	AddrsPerJob  int
	MinNodes     int
}

// collectives keeps the fabric manager's reservations in step with the
// job leases. Its methods are safe for concurrent use.
type collectives struct {
	cfg CollectivesConfig
	log *slog.Logger
	m   *metrics
	// locks orders the calls for one job ID: a reserve never runs beside
	// a release of the same job.
	locks keylock.Set
	kick  chan struct{}

	mu sync.Mutex
	// tokens are the session tokens of reservations made or found, by
	// job ID; memory only: a restarted controller asks again, and the
	// fabric manager answers the same reservation.
	tokens map[string]string
	// queue holds the job IDs of freed leases, each with the batch that
	// deletes the lease, for run to release once that is stored.
	queue []queuedRelease
}

type queuedRelease struct {
	id string
	b  *batch
}

func newCollectives(cfg CollectivesConfig, log *slog.Logger, m *metrics) *collectives {
	cfg.withDefaults()
	return &collectives{cfg: cfg, log: log, m: m, kick: make(chan struct{}, 1), tokens: map[string]string{}}
}

// jobID is the fabric manager's name for the job of owner UID uid.
func (c *collectives) jobID(uid string) string { return c.cfg.JobPrefix + "-" + uid }

// uidRE is the shape of a Kubernetes object UID (RFC 4122).
var uidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// mine reports whether id is a job ID this controller makes: its prefix
// followed by a UID alone, so that the prefix "k8s" never claims the
// reservations of a cluster whose prefix is "k8s-east".
func (c *collectives) mine(id string) bool {
	uid, ok := strings.CutPrefix(id, c.cfg.JobPrefix+"-")
	return ok && uidRE.MatchString(uid)
}

func (c *collectives) vars(id, token string) *Collectives {
	return &Collectives{JobID: id, JobStepID: "0", Token: token,
		FabricMgrURL: strings.TrimRight(c.cfg.JobURL, "/") + hwcoll.MulticastsPath,
		AddrsPerJob:  c.cfg.AddrsPerJob, MinNodes: c.cfg.MinNodes}
}

// retry runs op under the configured policy, retrying only temporary
// errors.
func (c *collectives) retry(ctx context.Context, op func(context.Context) error) error {
	return c.cfg.Retry.Do(ctx, func(ctx context.Context) error {
		err := op(ctx)
		if err != nil && !hwcoll.Temporary(err) {
			return backoff.Permanent(err)
		}
		return err
	})
}

// reserve returns the collectives of job ID id, reserving them at the
// fabric manager unless a reservation is known. The lease naming id must
// be live: a reservation is made only for a lease the store holds, so
// that none is made that no record names. Errors wrap ErrUnavailable
// (the fabric manager failed or refused) or ErrOwnerGone.
func (c *collectives) reserve(ctx context.Context, s *Allocator, id string) (*Collectives, error) {
	unlock := c.locks.Lock(id)
	defer unlock()
	c.mu.Lock()
	tok, ok := c.tokens[id]
	c.mu.Unlock()
	if ok {
		return c.vars(id, tok), nil
	}
	if !s.holdsHWColl(id) {
		return nil, fmt.Errorf("%w: the lease of fabric manager job %s was freed", ErrOwnerGone, id)
	}
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		tok, err = c.cfg.FM.Reserve(ctx, id, c.cfg.AddrsPerJob)
		c.m.observeHWColl(hwcollReserve, err)
		return err
	})
	if err != nil {
		// Fail closed: a job told to use hardware collectives without a
		// reservation would fail at its first collective; the agent's
		// acquire fails instead and is retried.
		return nil, fmt.Errorf("%w: hardware collectives: reserve %s at the fabric manager: %w", ErrUnavailable, id, err)
	}
	c.mu.Lock()
	c.tokens[id] = tok
	c.mu.Unlock()
	c.log.Info("reserved hardware collectives", "fm_job", id, "addrs", c.cfg.AddrsPerJob)
	return c.vars(id, tok), nil
}

// queueRelease queues the release of id once b, the batch deleting its
// lease, is stored; call with s.mu held (it does not block).
func (c *collectives) queueRelease(id string, b *batch) {
	c.mu.Lock()
	c.queue = append(c.queue, queuedRelease{id: id, b: b})
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// maxReleases bounds the releases in flight at once.
const maxReleases = 8

// run releases what freed leases reserved and reconciles with the fabric
// manager, at once and every ReconcileInterval, until ctx ends; it
// returns once every release it started has returned. What is queued or
// in flight when it ends is found by the next run's reconcile.
func (c *collectives) run(ctx context.Context, s *Allocator) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxReleases)
	t := time.NewTicker(c.cfg.ReconcileInterval)
	defer t.Stop()
	wg.Go(func() { c.reconcile(ctx, s) })
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.reconcile(ctx, s)
		case <-c.kick:
			c.mu.Lock()
			q := c.queue
			c.queue = nil
			c.mu.Unlock()
			for _, r := range q {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				wg.Go(func() {
					defer func() { <-sem }()
					c.releaseAfter(ctx, s, r)
				})
			}
		}
	}
}

// releaseAfter releases r's job once the batch deleting its lease is
// stored. A batch that failed leaves the lease to the reloaded state.
func (c *collectives) releaseAfter(ctx context.Context, s *Allocator, r queuedRelease) {
	if r.b != nil {
		select {
		case <-r.b.done:
		case <-ctx.Done():
			return
		}
		if r.b.err != nil {
			return
		}
	}
	if err := c.release(ctx, s, r.id); err != nil && ctx.Err() == nil {
		c.log.Warn("release hardware collectives; the next reconcile retries", "fm_job", r.id, "err", err)
	}
}

// release releases id at the fabric manager unless a live lease names it
// (a new lease of the same job, made since).
func (c *collectives) release(ctx context.Context, s *Allocator, id string) error {
	unlock := c.locks.Lock(id)
	defer unlock()
	if s.holdsHWColl(id) {
		return nil
	}
	c.mu.Lock()
	delete(c.tokens, id)
	c.mu.Unlock()
	err := c.retry(ctx, func(ctx context.Context) error {
		err := c.cfg.FM.Release(ctx, id)
		c.m.observeHWColl(hwcollRelease, err)
		return err
	})
	if err != nil {
		return fmt.Errorf("release %s at the fabric manager: %w", id, err)
	}
	c.log.Info("released hardware collectives", "fm_job", id)
	return nil
}

// reconcile lists the fabric manager's reservations and releases this
// controller's that no live lease names: those whose release a crash,
// a takeover or a failing fabric manager left undone.
func (c *collectives) reconcile(ctx context.Context, s *Allocator) {
	ids, err := c.cfg.FM.List(ctx)
	c.m.observeHWColl(hwcollList, err)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("list hardware-collectives reservations; retrying in the next reconcile", "err", err)
		}
		return
	}
	// The live set is read after the listing: a reservation listed was
	// made for a lease that was live before the listing, so it is either
	// still live here or freed.
	live, ok := s.hwcollJobs()
	if !ok {
		return
	}
	orphans := 0
	for _, id := range ids {
		if !c.mine(id) || live[id] {
			continue
		}
		orphans++
		if err := c.release(ctx, s, id); err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("release orphaned hardware collectives", "fm_job", id, "err", err)
		}
	}
	if orphans > 0 {
		c.log.Info("reconciled hardware collectives", "listed", len(ids), "orphans", orphans)
	}
}

// holdsHWColl reports whether a live lease names fabric manager job id.
func (s *Allocator) holdsHWColl(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready {
		// Unknown: say held, so that nothing is released on a guess.
		return true
	}
	for _, l := range s.leases {
		if l.rec.HWCollJob == id {
			return true
		}
	}
	return false
}

// hwcollJobs returns the fabric manager jobs live leases name; ok is
// false while the state is not loaded.
func (s *Allocator) hwcollJobs() (map[string]bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready {
		return nil, false
	}
	out := map[string]bool{}
	for _, l := range s.leases {
		if l.rec.HWCollJob != "" {
			out[l.rec.HWCollJob] = true
		}
	}
	return out, true
}

// hwcollIntent is the HWCollJob of a new lease of scope for owner: the
// reservation's name, recorded with the lease before any is made.
func (s *Allocator) hwcollIntent(scope store.Scope, owner store.Owner) string {
	if s.coll == nil || scope != store.ScopeJob || owner.UID == "" {
		return ""
	}
	return s.coll.jobID(owner.UID)
}
