package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for the zero values of [Config].
const (
	DefaultPollInterval  = 10 * time.Second
	DefaultHWErrorLimit  = 10
	DefaultHWErrorWindow = time.Minute
)

var (
	// ErrAlreadyStarted is returned by [Monitor.Run] when it is called a
	// second time; a Monitor runs once.
	ErrAlreadyStarted = errors.New("health monitor already started")
	// ErrInvalidTarget is wrapped by the error [Monitor.Run] returns for a
	// target without a NIC name or device directory, or a NIC named twice.
	ErrInvalidTarget = errors.New("invalid health target")
)

// Target is one NIC to watch, as discovery found it.
type Target struct {
	// NIC is the CXI device name, "cxi0".
	NIC string
	// NetDev is the NIC's Ethernet netdev, "hsn3"; "" when it has none.
	NetDev string
	// DeviceDir is the absolute path of the NIC's PCI device directory,
	// <sysroot>/class/cxi/cxi0/device; its properties/ directory is read.
	DeviceDir string
	// NetDir is the netdev's sysfs directory, <sysroot>/class/net/hsn3;
	// "" when it is not visible (no netdev, or another network namespace).
	NetDir string
}

// Config configures a [Monitor]. Only Targets is required.
type Config struct {
	// Targets are the NICs to watch.
	Targets []Target
	// Logger receives the monitor's log lines; nil discards them.
	Logger *slog.Logger
	// PollInterval is how often sysfs is re-read, since its attributes
	// raise no notifications. Netlink link events and [Monitor.Recheck]
	// trigger a re-read at once in between. Zero means
	// [DefaultPollInterval].
	PollInterval time.Duration
	// Ticks, when not nil, replaces the PollInterval ticker: every value
	// received triggers a re-read. Tests use it to poll without sleeping.
	Ticks <-chan time.Time
	// HWErrorLimit and HWErrorWindow make a NIC unhealthy while it has had
	// more than HWErrorLimit hardware errors within the last HWErrorWindow;
	// fewer are reported and counted but leave its health alone. The NIC
	// becomes healthy again at the first poll after the errors have aged
	// out of the window. A zero limit means [DefaultHWErrorLimit] and a
	// negative one turns the rule off; a zero window means
	// [DefaultHWErrorWindow].
	HWErrorLimit  int
	HWErrorWindow time.Duration
	// Registerer, when not nil, gets the monitor's metrics while it runs:
	// slingshot_agent_nic_healthy, slingshot_agent_nic_link_up (gauges)
	// and slingshot_agent_nic_hw_errors_total (a counter), labelled by nic.
	Registerer prometheus.Registerer
	// Now is the clock for the hardware-error window; nil means time.Now.
	Now func() time.Time
	// Sources turns the netlink, cxierr and ethtool sources off.
	Sources Sources
}

// NetErrors are a netdev's error counters from its statistics/ directory;
// a counter the kernel does not offer stays 0.
type NetErrors struct {
	RXErrors, TXErrors, RXDropped, TXDropped, RXCRCErrors, CarrierChanges uint64
}

// Status is what the monitor knows about one NIC. Two statuses are the same
// change-wise when they differ in counters (HWErrors, NetErrors) only.
type Status struct {
	// Healthy reports the health rule's verdict (see the package doc).
	Healthy bool
	// Problem says why the NIC is unhealthy, each failed check separated by
	// "; ". It is "" when Healthy.
	Problem string
	// LinkUp reports whether properties/link is 1.
	LinkUp bool
	// RetryHandler reports whether properties/pct_eq is not 0.
	RetryHandler bool
	// OperState is the netdev's operstate ("up", "down", ...); "" when the
	// target has no NetDir or it could not be read.
	OperState string
	// SpeedMbps is properties/speed in Mb/s; 0 when unknown.
	SpeedMbps int
	// NetDevSpeedMbps is the netdev's speed file in Mb/s; 0 when unknown.
	NetDevSpeedMbps int
	// Ethtool is what ethtool reports about the netdev.
	Ethtool EthtoolInfo
	// HWErrorBurst reports whether the NIC has had more than the configured
	// number of hardware errors within the window.
	HWErrorBurst bool
	// HWErrors counts the cxierr hardware errors seen since Run started.
	HWErrors uint64
	// NetErrors are the netdev's error counters.
	NetErrors NetErrors
}

// sameState reports whether a and b differ in nothing but counters.
func sameState(a, b Status) bool {
	a.HWErrors, b.HWErrors = 0, 0
	a.NetErrors, b.NetErrors = NetErrors{}, NetErrors{}
	return a == b
}

// Event reports a change of a NIC's status, or a hardware error.
type Event struct {
	NIC     string
	Healthy bool
	Status  Status
	// Reason is Status.Problem when unhealthy, "healthy" otherwise; for a
	// hardware error it starts with the error's description.
	Reason string
	// HWError is the hardware error this event reports; nil for a change.
	HWError *HWError
}

// Monitor watches the health of a set of NICs. Create it with [New] and run
// it once with [Monitor.Run].
type Monitor struct {
	cfg     Config
	log     *slog.Logger
	events  chan Event
	recheck chan struct{}
	started atomic.Bool

	mu   sync.Mutex
	snap map[string]Status
}

// New returns a Monitor for cfg, with defaults filled in. It starts nothing.
func New(cfg Config) *Monitor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.HWErrorLimit == 0 {
		cfg.HWErrorLimit = DefaultHWErrorLimit
	}
	if cfg.HWErrorWindow <= 0 {
		cfg.HWErrorWindow = DefaultHWErrorWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Targets = append([]Target(nil), cfg.Targets...)
	return &Monitor{
		cfg:     cfg,
		log:     cfg.Logger,
		events:  make(chan Event, max(16, 4*len(cfg.Targets))),
		recheck: make(chan struct{}, 1),
		snap:    make(map[string]Status, len(cfg.Targets)),
	}
}

// Events returns the channel of changes. The first reading of every NIC is
// delivered as an event, then only changes and hardware errors. Run closes
// the channel when it returns. A slow reader delays the next poll, it does
// not lose events.
func (m *Monitor) Events() <-chan Event { return m.events }

// Snapshot returns the latest status of every NIC read so far, by NIC name.
// It is safe to call from any goroutine.
func (m *Monitor) Snapshot() map[string]Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Status, len(m.snap))
	for k, v := range m.snap {
		out[k] = v
	}
	return out
}

// HWErrors returns how many hardware errors the NIC has reported since Run
// started (0 for an unknown NIC). It is safe to call from any goroutine.
func (m *Monitor) HWErrors(nic string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snap[nic].HWErrors
}

// Recheck asks the running monitor to re-read every NIC now. It never
// blocks; requests made while one is pending are merged.
func (m *Monitor) Recheck() {
	select {
	case m.recheck <- struct{}{}:
	default:
	}
}

// nicState is the monitor's per-NIC state, owned by Run's loop.
type nicState struct {
	Target
	status   Status
	reported bool
	// last is the latest reading, kept to re-judge on a hardware error.
	last reading
	// hwTimes holds the times of the latest hardware errors, at most
	// HWErrorLimit+1 of them, oldest first.
	hwTimes []time.Time
	// logged holds the keys of problems already logged, so a problem that
	// lasts is logged once; a key is cleared when the problem goes away.
	logged map[string]bool
}

// Run watches the targets until ctx ends, then stops every goroutine it
// started, waits for them, closes the Events channel and returns nil. It
// returns [ErrAlreadyStarted] when called twice, an error wrapping
// [ErrInvalidTarget] for bad targets, or the metrics registration error;
// the Events channel is closed in those cases too (except the first).
// Sources that cannot be opened are logged and left out.
func (m *Monitor) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	defer close(m.events)
	if err := validateTargets(m.cfg.Targets); err != nil {
		return err
	}
	met, err := registerMetrics(m.cfg.Registerer)
	if err != nil {
		return err
	}
	defer met.unregister()

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	states := make([]*nicState, len(m.cfg.Targets))
	watched := make(map[string]bool)
	for i, t := range m.cfg.Targets {
		states[i] = &nicState{Target: t, logged: make(map[string]bool)}
		if t.NetDev != "" {
			watched[t.NetDev] = true
		}
	}

	links := make(chan linkUpdate)
	hwErrs := make(chan HWError)
	m.startLinkSource(ctx, &wg, watched, links)
	m.startHWErrorSource(ctx, &wg, hwErrs)
	eth := m.openEthtool(len(watched) > 0)
	if eth != nil {
		defer func() { _ = eth.Close() }()
	}

	ticks := m.cfg.Ticks
	if ticks == nil {
		t := time.NewTicker(m.cfg.PollInterval)
		defer t.Stop()
		ticks = t.C
	}

	p := poller{m: m, eth: eth, met: met}
	p.all(ctx, states)
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-ticks:
			if !ok {
				// A closed tick channel stops polling, not the monitor.
				ticks = nil
				continue
			}
			p.all(ctx, states)
		case <-m.recheck:
			p.all(ctx, states)
		case u := <-links:
			m.log.Debug("link event", "netdev", u.Name, "operstate", u.Oper, "deleted", u.Deleted)
			for _, st := range states {
				if st.NetDev == u.Name {
					p.one(ctx, st)
				}
			}
		case e := <-hwErrs:
			p.hwError(ctx, states, e)
		}
	}
}

func validateTargets(ts []Target) error {
	seen := make(map[string]bool, len(ts))
	for i, t := range ts {
		switch {
		case t.NIC == "":
			return fmt.Errorf("%w: target %d has no NIC name", ErrInvalidTarget, i)
		case t.DeviceDir == "":
			return fmt.Errorf("%w: %s has no device directory", ErrInvalidTarget, t.NIC)
		case seen[t.NIC]:
			return fmt.Errorf("%w: %s named twice", ErrInvalidTarget, t.NIC)
		}
		seen[t.NIC] = true
	}
	return nil
}

// startLinkSource subscribes to rtnetlink link messages and forwards those
// of the watched netdevs to out, until ctx ends.
func (m *Monitor) startLinkSource(ctx context.Context, wg *sync.WaitGroup, watched map[string]bool, out chan<- linkUpdate) {
	if m.cfg.Sources.NoLinkEvents {
		return
	}
	if len(watched) == 0 {
		m.log.Info("no netdevs to watch, running without netlink link events")
		return
	}
	subscribe := m.cfg.Sources.subscribeLinks
	if subscribe == nil {
		subscribe = subscribeLinks
	}
	src := &linkSource{log: m.log, subscribe: subscribe, watched: watched, out: out, overrun: m.Recheck}
	sub, err := src.open()
	if err != nil {
		m.log.Warn("netlink link events unavailable, continuing without it", "err", err)
		return
	}
	m.log.Info("netlink link events subscribed")
	wg.Go(func() { src.run(ctx, sub) })
}

// startHWErrorSource joins the cxierr group and forwards decoded hardware
// errors to out, until ctx ends.
func (m *Monitor) startHWErrorSource(ctx context.Context, wg *sync.WaitGroup, out chan<- HWError) {
	if m.cfg.Sources.NoHWErrors {
		return
	}
	open := m.cfg.Sources.openHWErrors
	if open == nil {
		open = openHWErrorSubscription
	}
	sub, err := open()
	if err != nil {
		m.log.Warn("cxierr hardware error events unavailable, continuing without it", "err", err)
		return
	}
	m.log.Info("cxierr hardware error events subscribed")
	decode := func(msg []byte) (HWError, bool, error) {
		e, err := decodeHWErrorMessage(msg)
		return e, err == nil, err
	}
	pump(ctx, wg, m.log, "cxierr hardware error events", sub, decode, out)
}

// openEthtool opens the ethtool querier, or returns nil when it is turned
// off, not needed or unavailable.
func (m *Monitor) openEthtool(needed bool) ethtoolQuerier {
	if m.cfg.Sources.NoEthtool || !needed {
		return nil
	}
	open := m.cfg.Sources.openEthtool
	if open == nil {
		open = openEthtool
	}
	q, err := open()
	if err != nil {
		m.log.Warn("ethtool unavailable, continuing without it", "err", err)
		return nil
	}
	m.log.Info("ethtool opened")
	return q
}

// pump runs two goroutines on wg: one receives from sub, decodes and
// forwards to out; the other closes sub when ctx ends, which unblocks the
// first. A receive error other than an overrun stops the source (logged);
// an overrun is logged and the source goes on.
func pump[T any](ctx context.Context, wg *sync.WaitGroup, log *slog.Logger, name string, sub subscription,
	decode func([]byte) (T, bool, error), out chan<- T) {
	wg.Go(func() {
		<-ctx.Done()
		_ = sub.Close()
	})
	wg.Go(func() {
		for {
			msgs, err := sub.Receive()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if isOverrun(err) {
					log.Warn(name+": kernel dropped notifications", "err", err)
					continue
				}
				log.Warn(name+" stopped, continuing without it", "err", err)
				return
			}
			for _, msg := range msgs {
				v, ok, err := decode(msg)
				if err != nil {
					log.Warn(name+": ignoring a malformed message", "err", err)
					continue
				}
				if !ok {
					continue
				}
				select {
				case out <- v:
				case <-ctx.Done():
					return
				}
			}
		}
	})
}

// poller reads NICs and reports changes; it runs on Run's goroutine only.
type poller struct {
	m   *Monitor
	eth ethtoolQuerier
	met *metrics
}

func (p *poller) all(ctx context.Context, states []*nicState) {
	for _, st := range states {
		if ctx.Err() != nil {
			return
		}
		p.one(ctx, st)
	}
}

// one re-reads a NIC and reports it if anything but counters changed.
func (p *poller) one(ctx context.Context, st *nicState) {
	next, r := p.read(st)
	r.burst = p.burst(st, false)
	st.last = r
	next.HWErrors = st.status.HWErrors
	next.HWErrorBurst = r.burst
	next.Healthy, next.Problem = judge(r)
	p.update(ctx, st, next, nil)
}

// hwError counts a hardware error against its NIC and reports it. The
// NIC's other checks keep their last reading; only the window rule is
// judged anew.
func (p *poller) hwError(ctx context.Context, states []*nicState, e HWError) {
	nic := e.NIC()
	for _, st := range states {
		if st.NIC != nic {
			continue
		}
		p.met.hwError(nic)
		st.last.burst = p.burst(st, true)
		next := st.status
		next.HWErrors++
		next.HWErrorBurst = st.last.burst
		next.Healthy, next.Problem = judge(st.last)
		p.update(ctx, st, next, &e)
		return
	}
	p.m.log.Debug("hardware error on a NIC not watched", "nic", nic, "csr", e.CSRFlag, "bit", e.Bit)
}

// burst records a hardware error when add is set, forgets the ones that
// have left the window, and reports whether more than the limit remain.
func (p *poller) burst(st *nicState, add bool) bool {
	limit := p.m.cfg.HWErrorLimit
	if limit < 0 {
		return false
	}
	now := p.m.cfg.Now()
	if add {
		st.hwTimes = append(st.hwTimes, now)
		if len(st.hwTimes) > limit+1 {
			st.hwTimes = st.hwTimes[len(st.hwTimes)-(limit+1):]
		}
	}
	cut := now.Add(-p.m.cfg.HWErrorWindow)
	keep := st.hwTimes[:0]
	for _, t := range st.hwTimes {
		if t.After(cut) {
			keep = append(keep, t)
		}
	}
	st.hwTimes = keep
	return len(st.hwTimes) > limit
}

// update stores next as the NIC's status and sends an event when the
// status changed (beyond counters), when it is the NIC's first reading, or
// when hw is set.
func (p *poller) update(ctx context.Context, st *nicState, next Status, hw *HWError) {
	changed := !st.reported || !sameState(st.status, next)
	st.status = next
	p.m.mu.Lock()
	p.m.snap[st.NIC] = next
	p.m.mu.Unlock()
	p.met.set(st.NIC, next)
	if !changed && hw == nil {
		return
	}
	st.reported = true
	reason := "healthy"
	if !next.Healthy {
		reason = next.Problem
	}
	if hw != nil {
		reason = fmt.Sprintf("%s (%d so far); %s", hw, next.HWErrors, reason)
		p.m.log.Warn("hardware error", "nic", st.NIC, "csr", fmt.Sprintf("0x%x", hw.CSRFlag), "bit", hw.Bit, "count", next.HWErrors)
	}
	if changed {
		p.m.log.Info("NIC health", "nic", st.NIC, "healthy", next.Healthy, "reason", reason,
			"link", next.LinkUp, "retry_handler", next.RetryHandler, "operstate", next.OperState)
	}
	select {
	case p.m.events <- Event{NIC: st.NIC, Healthy: next.Healthy, Status: next, Reason: reason, HWError: hw}:
	case <-ctx.Done():
	}
}

// reading holds the inputs of the health rule.
type reading struct {
	linkUp    bool
	linkErr   error
	rhRunning bool
	rhErr     error
	hasNetDev bool
	netDev    string
	operState string
	operErr   error
	burst     bool
	limit     int
	window    time.Duration
}

// judge applies the health rule: link up, retry handler running, netdev up
// when one is known, and no hardware-error burst. It returns the verdict and,
// when unhealthy, every failed check.
func judge(r reading) (bool, string) {
	var problems []string
	switch {
	case r.linkErr != nil:
		problems = append(problems, "link state unknown: "+r.linkErr.Error())
	case !r.linkUp:
		problems = append(problems, "link down")
	}
	switch {
	case r.rhErr != nil:
		problems = append(problems, "retry handler state unknown: "+r.rhErr.Error())
	case !r.rhRunning:
		problems = append(problems, "retry handler not running")
	}
	if r.hasNetDev {
		switch {
		case r.operErr != nil:
			problems = append(problems, "netdev state unknown: "+r.operErr.Error())
		case r.operState != "up":
			problems = append(problems, fmt.Sprintf("netdev %s %s", r.netDev, r.operState))
		}
	}
	if r.burst {
		problems = append(problems, fmt.Sprintf("more than %d hardware errors within %s", r.limit, r.window))
	}
	return len(problems) == 0, strings.Join(problems, "; ")
}
