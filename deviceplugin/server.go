package deviceplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// Defaults of ServerConfig.
const (
	DefaultPluginDir         = pluginapi.DevicePluginPath
	DefaultKubeletSocketName = "kubelet.sock"
	DefaultRegisterTimeout   = 5 * time.Second
	DefaultReregisterDelay   = 250 * time.Millisecond
)

// DefaultBackoff bounds registration retries while the kubelet is not up:
// about 45 s in all. A new kubelet.sock cuts any wait short, so the bound
// only matters when the kubelet never appears.
var DefaultBackoff = backoff.Policy{
	Initial:  100 * time.Millisecond,
	Max:      5 * time.Second,
	Factor:   2,
	Jitter:   0.2,
	Attempts: 15,
}

// quickStreamLifetime: a ListAndWatch stream that the kubelet ends sooner
// than this counts as a quick end, and consecutive quick ends stretch the
// delay before registering again, so a kubelet that keeps dropping the
// plugin is not hammered.
const quickStreamLifetime = 10 * time.Second

// ErrAlreadyRunning is returned by [Server.Run] while another Run of the
// same Server has not returned.
var ErrAlreadyRunning = errors.New("device plugin server already running")

// ErrInvalidConfig is wrapped by the errors of [NewServer].
var ErrInvalidConfig = errors.New("invalid device plugin config")

// ServerConfig configures one [Server]. Only Resource is required.
type ServerConfig struct {
	// Resource is the extended resource the server advertises.
	Resource Resource
	// PluginDir is the kubelet's device-plugins directory,
	// <kubelet-dir>/device-plugins; default DefaultPluginDir.
	PluginDir string
	// SocketName is the server's socket file name inside PluginDir;
	// default derived from the resource name, "hpe.com/cxi" giving
	// "slingshot-hpe.com-cxi.sock".
	SocketName string
	// KubeletSocketName is the kubelet's registration socket inside
	// PluginDir; default DefaultKubeletSocketName.
	KubeletSocketName string
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the metrics; nil leaves them unregistered.
	// Servers sharing a Registerer share the collectors.
	Registerer prometheus.Registerer
	// Backoff bounds the retries of one registration; the zero Policy
	// means DefaultBackoff. When its Wait is nil, a new kubelet.sock
	// interrupts a wait between attempts.
	Backoff backoff.Policy
	// RegisterTimeout bounds one Register call; default
	// DefaultRegisterTimeout.
	RegisterTimeout time.Duration
	// ReregisterDelay is how long the server waits after the kubelet
	// closed the last ListAndWatch stream before it registers again, so
	// that the kubelet has dropped the old endpoint; default
	// DefaultReregisterDelay.
	ReregisterDelay time.Duration
}

// Status is a point-in-time view of a Server, for health endpoints.
type Status struct {
	// Serving reports whether the server listens on its socket.
	Serving bool
	// Registered reports whether the last registration succeeded and the
	// kubelet has not dropped the plugin since.
	Registered bool
	// Registering reports whether a registration is under way: a Register
	// call, or a wait between two of its attempts.
	Registering bool
	// Streams is the number of open ListAndWatch streams.
	Streams int
	// LastRegistered is when the last registration succeeded.
	LastRegistered time.Time
	// LastError is the last registration or serving error, nil after a
	// successful registration.
	LastError error
}

// Server is one kubelet device plugin: one resource, one gRPC server, one
// socket. Create it with [NewServer], feed devices with [Server.Update] and
// call [Server.Run].
type Server struct {
	res             Resource
	name            string
	dir             string
	socketName      string
	socketPath      string
	kubeletPath     string
	log             *slog.Logger
	backoff         backoff.Policy
	registerTimeout time.Duration
	reregisterDelay time.Duration
	// dial connects to the kubelet's socket at path; tests replace it
	// before Run.
	dial func(ctx context.Context, path string) (net.Conn, error)

	// Collectors curried for this resource, resolved once for the hot path.
	m               *metrics
	registeredOK    prometheus.Counter
	registerFailed  prometheus.Counter
	allocatedOK     prometheus.Counter
	allocateFailed  prometheus.Counter
	allocateSeconds prometheus.Observer
	preStartSeconds prometheus.Observer
	streamsGauge    prometheus.Gauge

	running atomic.Bool
	// kubeletCreated is when kubelet.sock was last created (Unix ns).
	kubeletCreated atomic.Int64
	// streamEnded wakes Run when the kubelet, not the server, ended the
	// last ListAndWatch stream of the current epoch.
	streamEnded chan struct{}

	mu      sync.Mutex
	devices *deviceSet
	changed chan struct{} // closed and replaced by every Update that changes devices
	streams int
	// The kubelet calls GetDevicePluginOptions once each time it connects
	// a client to the plugin, before it opens ListAndWatch. Each call
	// starts a new epoch: the generation it reached tells which socket a
	// registration really connected, and a stream of an older epoch that
	// ends says nothing about the current connection.
	epoch        uint64
	epochGen     int // generation that served the epoch's options call
	epochStreams int // open streams of the current epoch
	endedEpoch   uint64
	quickEnded   bool // the last stream of the epoch lived < quickStreamLifetime
	status       Status
}

// NewServer checks cfg and returns a Server that advertises no devices
// until [Server.Update] is called. It returns an error wrapping
// ErrInvalidConfig for a missing Resource, a resource name the kubelet
// would reject, or a socket path too long for a unix socket, and the
// registration error when the metrics cannot be registered.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Resource == nil {
		return nil, fmt.Errorf("%w: no resource", ErrInvalidConfig)
	}
	name := cfg.Resource.Name()
	if err := validateResourceName(name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	dir, err := filepath.Abs(cmp.Or(cfg.PluginDir, DefaultPluginDir))
	if err != nil {
		return nil, fmt.Errorf("%w: plugin dir: %w", ErrInvalidConfig, err)
	}
	s := &Server{
		res:             cfg.Resource,
		name:            name,
		dir:             dir,
		socketName:      cmp.Or(cfg.SocketName, defaultSocketName(name)),
		log:             cfg.Logger,
		backoff:         cfg.Backoff,
		registerTimeout: cmp.Or(cfg.RegisterTimeout, DefaultRegisterTimeout),
		reregisterDelay: cmp.Or(cfg.ReregisterDelay, DefaultReregisterDelay),
		dial:            dialUnix,
		streamEnded:     make(chan struct{}, 1),
		changed:         make(chan struct{}),
	}
	kubeletName := cmp.Or(cfg.KubeletSocketName, DefaultKubeletSocketName)
	for _, n := range []string{s.socketName, kubeletName} {
		if n != filepath.Base(n) || n == "." || n == ".." {
			return nil, fmt.Errorf("%w: socket name %q is not a plain file name", ErrInvalidConfig, n)
		}
	}
	if s.socketName == kubeletName {
		return nil, fmt.Errorf("%w: socket name %q is the kubelet's", ErrInvalidConfig, s.socketName)
	}
	s.socketPath = filepath.Join(s.dir, s.socketName)
	s.kubeletPath = filepath.Join(s.dir, kubeletName)
	for _, p := range []string{s.socketPath, s.kubeletPath} {
		if len(p) > maxSocketPath {
			return nil, fmt.Errorf("%w: socket path %s longer than %d bytes", ErrInvalidConfig, p, maxSocketPath)
		}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("resource", name)
	if s.backoff.IsZero() {
		s.backoff = DefaultBackoff
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	s.m = m
	s.registeredOK = m.registrations.WithLabelValues(name, resultSuccess)
	s.registerFailed = m.registrations.WithLabelValues(name, resultFailure)
	s.allocatedOK = m.allocations.WithLabelValues(name, resultSuccess)
	s.allocateFailed = m.allocations.WithLabelValues(name, resultFailure)
	s.allocateSeconds = m.allocateSeconds.WithLabelValues(name)
	s.preStartSeconds = m.preStartSeconds.WithLabelValues(name)
	s.streamsGauge = m.streams.WithLabelValues(name)
	s.devices, _ = newDeviceSet(nil, 0)
	s.setDeviceGauges(s.devices)
	return s, nil
}

// ResourceName returns the extended resource name the server advertises.
func (s *Server) ResourceName() string { return s.name }

// SocketPath returns the path of the server's unix socket.
func (s *Server) SocketPath() string { return s.socketPath }

// Status returns the server's current state.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Streams = s.streams
	return st
}

// Update replaces the advertised devices with a copy of devs and, when
// anything changed, sends the new list on every open ListAndWatch stream;
// an unchanged list sends nothing, so callers may poll (the kubelet
// rewrites its checkpoint on every message; [Server.Resend] sends on
// purpose). Devices with an empty ID, an
// ID longer than 63 characters or an ID seen before in devs are left out
// and logged. Update may be called before Run, to advertise the devices
// from the first ListAndWatch on.
func (s *Server) Update(devs []Device) {
	s.mu.Lock()
	old := s.devices
	set, dropped := newDeviceSet(devs, old.version+1)
	if set.sameDevices(old) {
		s.mu.Unlock()
		s.logDropped(dropped)
		return
	}
	s.devices = set
	close(s.changed)
	s.changed = make(chan struct{})
	for _, d := range set.list {
		prev, ok := old.byID[d.ID]
		if !ok || prev.Healthy == d.Healthy {
			continue
		}
		health := healthUnhealthy
		if d.Healthy {
			health = healthHealthy
		}
		s.m.healthChanges.WithLabelValues(s.name, health).Inc()
		s.log.Info("device health changed", "device", d.ID, "health", health)
	}
	s.setDeviceGauges(set)
	s.mu.Unlock()
	s.logDropped(dropped)
}

// Resend sends the unchanged device list once more on every open
// ListAndWatch stream. The kubelet rewrites its device checkpoint from
// memory on every message it receives, and only then does the file stop
// naming the pods it freed in memory: the agent nudges it so with Resend
// when a pod has left PodResources but not yet the checkpoint. Sends that
// are still pending when Resend is called again are sent once.
func (s *Server) Resend() {
	s.mu.Lock()
	defer s.mu.Unlock()
	again := *s.devices // the set is immutable: share its lists and maps
	again.version++
	s.devices = &again
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) logDropped(dropped []error) {
	for _, err := range dropped {
		s.log.Warn("device left out", "err", err)
	}
}

func (s *Server) setDeviceGauges(set *deviceSet) {
	s.m.devices.WithLabelValues(s.name, healthHealthy).Set(float64(set.healthy))
	s.m.devices.WithLabelValues(s.name, healthUnhealthy).Set(float64(len(set.list) - set.healthy))
}

// snapshot returns the current devices and a channel closed by the next
// Update.
func (s *Server) snapshot() (*deviceSet, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.devices, s.changed
}

func (s *Server) currentDevices() *deviceSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.devices
}

// kubeletConnected starts a new epoch; see Server.epoch.
func (s *Server) kubeletConnected(gen int) {
	s.mu.Lock()
	s.epoch++
	s.epochGen = gen
	s.epochStreams = 0
	s.mu.Unlock()
}

// currentEpoch returns the epoch and the generation that started it.
func (s *Server) currentEpoch() (uint64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch, s.epochGen
}

// streamOpened and streamClosed keep count of the ListAndWatch streams.
// streamClosed wakes Run when the kubelet (not the server) ended the last
// stream of the current epoch.
func (s *Server) streamOpened() (epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams++
	s.epochStreams++
	s.streamsGauge.Set(float64(s.streams))
	return s.epoch
}

func (s *Server) streamClosed(epoch uint64, lifetime time.Duration, byKubelet bool) {
	s.mu.Lock()
	s.streams--
	s.streamsGauge.Set(float64(s.streams))
	current := epoch == s.epoch
	if current {
		s.epochStreams--
	}
	wake := byKubelet && current && s.epochStreams == 0
	if wake {
		s.endedEpoch = epoch
		s.quickEnded = lifetime < quickStreamLifetime
	}
	s.mu.Unlock()
	if wake {
		select {
		case s.streamEnded <- struct{}{}:
		default:
		}
	}
}

// droppedEpoch reports the current epoch and whether the kubelet has ended
// all of its streams, and whether the last one ended quickly.
func (s *Server) droppedEpoch() (epoch uint64, dropped, quick bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch, s.epoch > 0 && s.endedEpoch == s.epoch && s.epochStreams == 0, s.quickEnded
}

// dropped reports whether epoch is the current epoch and the kubelet has
// ended all of its streams.
func (s *Server) dropped(epoch uint64) bool {
	current, dropped, _ := s.droppedEpoch()
	return dropped && current == epoch
}

func (s *Server) setStatus(f func(*Status)) {
	s.mu.Lock()
	f(&s.status)
	s.mu.Unlock()
}

// Run serves the kubelet until ctx ends: it listens on the socket,
// registers, watches the device-plugins directory, serves again when its
// socket is removed, and registers again when the kubelet restarts or
// drops the plugin, never while the kubelet holds its connection. On
// return it has stopped gRPC, removed its socket and stopped every
// goroutine it started. It returns nil when ctx ended, ErrAlreadyRunning
// when another Run is active, and an error when the directory cannot be
// watched or the socket cannot be served within the Backoff's attempts.
// Registration failures never end Run: it logs them and waits for the next
// kubelet.sock.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer s.running.Store(false)

	if err := os.MkdirAll(s.dir, 0o750); err != nil {
		return fmt.Errorf("create plugin dir: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch plugin dir: %w", err)
	}
	defer w.Close()
	if err := w.Add(s.dir); err != nil {
		return fmt.Errorf("watch plugin dir %s: %w", s.dir, err)
	}

	r := &runLoop{
		s:           s,
		w:           w,
		connsClosed: make(chan struct{}, 1),
		kick:        make(chan struct{}, 1),
		regDone:     make(chan regResult, 1),
	}
	err = r.run(ctx)
	r.shutdown()
	return err
}

// runLoop is the state of one Run, touched only by Run's goroutine.
type runLoop struct {
	s *Server
	w *fsnotify.Watcher

	gen   *generation // nil while the socket is not served
	genID int
	// retired are older generations that the kubelet is still connected
	// to; each is stopped once its last connection has ended, which
	// connsClosed tells.
	retired     []*generation
	connsClosed chan struct{}

	serveFailures int
	serveRetry    *time.Timer

	// registered is set by a successful registration and cleared when the
	// kubelet drops the plugin.
	registered *regRecord
	regCancel  context.CancelFunc
	regWG      sync.WaitGroup
	regRunning bool
	regPending bool
	kick       chan struct{}
	regDone    chan regResult

	rereg      *time.Timer
	reregEpoch uint64
	quickEnds  int
	lastReason string
}

// regRecord says which server generation registered with which kubelet.
type regRecord struct {
	gen     int
	kubelet fileID
}

func (r *runLoop) run(ctx context.Context) error {
	s := r.s
	if err := r.serve(ctx, ""); err != nil {
		return err
	}
	for {
		var genDone <-chan struct{}
		if r.gen != nil {
			genDone = r.gen.done
		}
		select {
		case <-ctx.Done():
			s.log.Info("stopping device plugin", "cause", context.Cause(ctx))
			return nil

		case ev, ok := <-r.w.Events:
			if !ok {
				return errors.New("watch plugin dir: watcher closed")
			}
			if err := r.handleEvent(ctx, ev); err != nil {
				return err
			}

		case err, ok := <-r.w.Errors:
			if !ok {
				return errors.New("watch plugin dir: watcher closed")
			}
			// A lost event may have been ours: check the sockets directly.
			s.log.Warn("watching plugin dir", "err", err)
			if err := r.resync(ctx); err != nil {
				return err
			}

		case <-s.streamEnded:
			r.streamEnded()

		case <-timerC(r.rereg):
			r.rereg = nil
			if epoch, dropped, _ := s.droppedEpoch(); dropped && epoch == r.reregEpoch {
				s.log.Warn("kubelet closed the ListAndWatch stream; registering again")
				s.m.reregistrations.WithLabelValues(s.name, reasonStreamEnded).Inc()
				r.registered = nil
				s.setStatus(func(st *Status) { st.Registered = false })
				r.wantRegister(ctx, reasonStreamEnded)
			}

		case <-timerC(r.serveRetry):
			r.serveRetry = nil
			if err := r.serve(ctx, r.lastReason); err != nil {
				return err
			}

		case <-genDone:
			err := r.gen.serveErr
			s.log.Error("gRPC server stopped unexpectedly; serving again", "err", err)
			s.setStatus(func(st *Status) { st.LastError = err })
			if err := r.serve(ctx, reasonServeFailed); err != nil {
				return err
			}

		case res := <-r.regDone:
			r.registrationDone(ctx, res)

		case <-r.connsClosed:
			r.stopIdleRetired()
		}
	}
}

// timerC returns t's channel, or nil (blocking forever) for no timer.
func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// handleEvent reacts to one change in the device-plugins directory.
func (r *runLoop) handleEvent(ctx context.Context, ev fsnotify.Event) error {
	s := r.s
	switch filepath.Clean(ev.Name) {
	case s.kubeletPath:
		if ev.Has(fsnotify.Create) {
			s.kubeletCreated.Store(time.Now().UnixNano())
			s.log.Info("kubelet socket created", "path", ev.Name)
			r.kubeletRestarted(ctx)
		}
	case s.socketPath:
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			return r.checkOwnSocket(ctx)
		}
	case s.dir:
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			// The watch died with the directory: make both again.
			s.log.Warn("plugin dir removed; creating it again", "path", s.dir)
			if err := os.MkdirAll(s.dir, 0o750); err != nil {
				return fmt.Errorf("create plugin dir: %w", err)
			}
			if err := r.w.Add(s.dir); err != nil {
				return fmt.Errorf("watch plugin dir %s: %w", s.dir, err)
			}
			return r.serve(ctx, reasonSocketRemoved)
		}
	}
	return nil
}

// resync checks by hand what a lost event might have reported.
func (r *runLoop) resync(ctx context.Context) error {
	if err := r.checkOwnSocket(ctx); err != nil {
		return err
	}
	if r.needsRegistration() {
		r.kubeletRestarted(ctx)
	}
	return nil
}

// checkOwnSocket serves again unless the socket at the server's path is
// still the one the current generation listens on; events about sockets
// the server itself replaced arrive late and are ignored here.
func (r *runLoop) checkOwnSocket(ctx context.Context) error {
	if r.gen == nil {
		return nil // a retry is already scheduled
	}
	if id, err := statID(r.s.socketPath); err == nil && id == r.gen.socketID {
		return nil
	}
	r.s.log.Warn("device plugin socket removed (kubelet restart?); serving again", "path", r.s.socketPath)
	return r.serve(ctx, reasonSocketRemoved)
}

func (r *runLoop) kubeletRestarted(ctx context.Context) {
	if !r.needsRegistration() {
		r.s.log.Debug("already registered with this kubelet")
		return
	}
	r.s.m.reregistrations.WithLabelValues(r.s.name, reasonKubeletRestart).Inc()
	r.wantRegister(ctx, reasonKubeletRestart)
}

// serve stops the current generation, if any, and serves a new one. When
// listening fails it schedules a retry; it returns an error only when the
// Backoff's attempts are spent.
func (r *runLoop) serve(ctx context.Context, reason string) error {
	s := r.s
	if reason != "" && r.gen != nil {
		s.m.reregistrations.WithLabelValues(s.name, reason).Inc()
	}
	if r.gen != nil {
		r.retire(r.gen)
		r.gen = nil
		s.setStatus(func(st *Status) { st.Serving = false })
	}
	r.genID++
	gen, err := s.startServing(r.genID, r.connsClosed)
	if err != nil {
		r.serveFailures++
		s.setStatus(func(st *Status) { st.LastError = err })
		attempts := max(s.backoff.Attempts, 1)
		if r.serveFailures >= attempts {
			return fmt.Errorf("serve device plugin after %d attempts: %w", r.serveFailures, err)
		}
		delay := s.backoff.Delay(r.serveFailures)
		s.log.Error("serving device plugin failed; retrying", "attempt", r.serveFailures, "of", attempts, "retry_in", delay, "err", err)
		r.lastReason = reason
		r.serveRetry = time.NewTimer(delay)
		return nil
	}
	r.serveFailures = 0
	r.gen = gen
	s.setStatus(func(st *Status) { st.Serving = true })
	s.log.Info("serving device plugin", "socket", s.socketPath)
	r.wantRegister(ctx, reason)
	return nil
}

// retire takes g off the socket path. A generation the kubelet is still
// connected to keeps serving that connection: the kubelet takes one
// connection per plugin socket path and refuses a Register for the path
// while it holds one, so the server neither cuts the connection nor
// registers again while it lasts. It is stopped once the kubelet has
// closed it; a kubelet that drops the plugin ends its stream first, and
// the server then registers its current generation.
func (r *runLoop) retire(g *generation) {
	if g.conns.open.Load() > 0 {
		r.s.log.Info("the kubelet is still connected to the old socket; serving that connection until it closes", "generation", g.svc.gen)
		r.retired = append(r.retired, g)
		return
	}
	r.stopGeneration(g, false)
}

// stopIdleRetired stops the retired generations left without connections.
func (r *runLoop) stopIdleRetired() {
	kept := r.retired[:0]
	for _, g := range r.retired {
		if g.conns.open.Load() > 0 {
			kept = append(kept, g)
			continue
		}
		r.stopGeneration(g, false)
	}
	clear(r.retired[len(kept):])
	r.retired = kept
}

func (r *runLoop) stopGeneration(g *generation, cut bool) {
	if err := g.stop(r.s.socketPath, cut); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.s.log.Warn("removing old socket", "err", err)
	}
}

// needsRegistration reports whether the kubelet may not know the plugin:
// never registered, dropped since, or registered with a kubelet whose
// socket has since been created again. Which generation the kubelet is
// connected to does not matter: an older one serves until the kubelet
// closes its connection (see retire).
func (r *runLoop) needsRegistration() bool {
	if r.registered == nil {
		return true
	}
	id, err := statID(r.s.kubeletPath)
	return err != nil || id != r.registered.kubelet
}

// wantRegister starts a registration, or, while one runs, asks it to try
// again at once and to be followed by another if still needed.
func (r *runLoop) wantRegister(ctx context.Context, reason string) {
	if r.regRunning {
		r.regPending = true
		select {
		case r.kick <- struct{}{}:
		default:
		}
		return
	}
	if r.gen == nil || !r.needsRegistration() {
		return
	}
	// Drop a kick meant for the previous registration.
	select {
	case <-r.kick:
	default:
	}
	regCtx, cancel := context.WithCancel(ctx)
	r.regCancel = cancel
	r.regRunning = true
	r.regPending = false
	gen := r.genID
	r.s.setStatus(func(st *Status) { st.Registering = true })
	r.regWG.Go(func() {
		r.regDone <- r.s.register(regCtx, gen, reason, r.kick)
	})
}

func (r *runLoop) registrationDone(ctx context.Context, res regResult) {
	s := r.s
	r.regRunning = false
	r.regCancel()
	r.regCancel = nil
	// Status shows Registering until it is known whether another
	// registration follows this one.
	defer func() { s.setStatus(func(st *Status) { st.Registering = r.regRunning }) }()
	recorded := false
	switch {
	case res.err == nil && s.dropped(res.epoch):
		// The kubelet ended the stream this registration opened before
		// the Register call returned. The stream-end timer has asked for
		// a registration meanwhile (regPending, below) or will: it
		// registers again once the kubelet has had time to forget the
		// connection.
		r.registered = nil
		s.setStatus(func(st *Status) { st.Registered = false })
		s.log.Warn("kubelet closed the ListAndWatch stream before Register returned", "attempts", res.attempts, "reason", res.reason)
	case res.err == nil:
		// res.gen is the generation the kubelet actually connected; an
		// older one than the current serves it until it closes.
		// A pending stream-end timer stays armed: the kubelet may already
		// have dropped the stream this registration opened, and the
		// timer's epoch check ignores it otherwise.
		r.registered = &regRecord{gen: res.gen, kubelet: res.kubelet}
		recorded = true
		now := time.Now()
		s.setStatus(func(st *Status) {
			st.Registered, st.LastRegistered, st.LastError = true, now, nil
		})
		s.log.Info("registered with kubelet", "attempts", res.attempts, "reason", res.reason, "socket", s.socketName, "generation", res.gen)
	case ctx.Err() != nil:
		return
	default:
		r.registered = nil
		s.setStatus(func(st *Status) { st.Registered, st.LastError = false, res.err })
		s.log.Error("registration with kubelet failed; waiting for kubelet.sock to be created again", "err", res.err)
	}
	if r.regPending || (recorded && r.needsRegistration()) {
		r.regPending = false
		r.wantRegister(ctx, "")
	}
}

// streamEnded arms the re-registration timer when the kubelet has closed
// the last stream of its current connection.
func (r *runLoop) streamEnded() {
	s := r.s
	epoch, dropped, quick := s.droppedEpoch()
	if !dropped || (r.rereg != nil && r.reregEpoch == epoch) {
		return
	}
	if quick {
		r.quickEnds++
	} else {
		r.quickEnds = 0
	}
	limit := max(s.backoff.Max, s.reregisterDelay)
	delay := s.reregisterDelay
	for i := 1; i < r.quickEnds && delay < limit; i++ {
		delay *= 2
	}
	delay = min(delay, limit)
	s.log.Info("kubelet closed the ListAndWatch stream", "register_again_in", delay)
	if r.rereg != nil {
		r.rereg.Stop()
	}
	r.rereg = time.NewTimer(delay)
	r.reregEpoch = epoch
}

// shutdown stops registration and serving and removes the socket.
func (r *runLoop) shutdown() {
	if r.regCancel != nil {
		r.regCancel()
	}
	r.regWG.Wait()
	for _, t := range []*time.Timer{r.rereg, r.serveRetry} {
		if t != nil {
			t.Stop()
		}
	}
	for _, g := range r.retired {
		r.stopGeneration(g, true)
	}
	r.retired = nil
	if r.gen != nil {
		r.stopGeneration(r.gen, true)
		r.gen = nil
	}
	r.s.setStatus(func(st *Status) { st.Serving, st.Registered, st.Registering = false, false, false })
	r.s.log.Info("device plugin stopped")
}
