// Package nri is the agent as a plugin of the container runtime's Node
// Resource Interface, for either front end: at RunPodSandbox the front
// end binds the pod's services to its new network namespace (DRA), at
// CreateContainer it refuses a container whose services are not bound to
// its pod's namespace and sets the environment that names them (both), and
// at Synchronize, the runtime's first call on a connection, it binds or
// holds again the running pods' services.
//
// The runtime gives a plugin a bounded time per call (containerd's
// plugin_request_timeout, 2 s by default) and goes on without it after
// that: a front end's answers must fit, and slow work (destroys retried on
// EBUSY) happen outside the call.
package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// Sandbox is a pod's sandbox as the runtime reports it.
type Sandbox struct {
	UID, Namespace, Name string
	// NetnsPath is the sandbox's network namespace; empty when the pod
	// shares the host's (hostNetwork).
	NetnsPath string
}

// Key is the pod's "namespace/name".
func (s Sandbox) Key() string { return s.Namespace + "/" + s.Name }

// Container is a container about to be created.
type Container struct {
	Name string
	// Env is its environment as the runtime built it ("K=V"), the
	// device plugin's and CDI's included.
	Env []string
}

// Front is what a front end does at the runtime's calls.
type Front interface {
	// Bind binds the services of the pod whose sandbox starts; an error
	// fails the sandbox.
	Bind(ctx context.Context, sb Sandbox) error
	// Check refuses a container whose pod's services are not bound to the
	// sandbox's namespace, and returns the environment to set ("K=V").
	Check(ctx context.Context, sb Sandbox, ctr Container) ([]string, error)
	// Synchronize binds or holds again the services of the running pods,
	// after a (re)connection; it returns what the log line says of it.
	Synchronize(ctx context.Context, sbs []Sandbox) []any
	// Refused tells the pod that its sandbox (container "") or one of its
	// containers was refused, and why.
	Refused(sb Sandbox, container string, err error)
}

// State is the agent's connection to the runtime's NRI socket. Where a
// front end relies on it, nothing checks a container without it: the
// agent is not ready, and binds are refused, until it is up. Safe for
// concurrent use.
type State struct {
	socket    string
	connected func(bool) // the gauge; nil: none
	events    event.Recorder
	node      string

	mu   sync.Mutex // guards the fields below
	up   bool
	err  error // why it is not connected
	told event.Reason
}

// NewState is the state of a connection to socket not made yet;
// connected (nil: none) is told of each change.
func NewState(socket string, connected func(bool)) *State {
	if connected == nil {
		connected = func(bool) {}
	}
	connected(false)
	return &State{socket: socket, connected: connected, events: event.Nop{}, err: errors.New("not connected yet")}
}

// WithEvents makes s tell node of each loss of the connection, and of
// each reconnection after one; call it before the connection is run.
func (s *State) WithEvents(ev event.Recorder, node string) *State {
	s.events, s.node = ev, node
	return s
}

// Socket is the runtime's NRI socket.
func (s *State) Socket() string { return s.socket }

// Ready is nil while connected, else an error saying why not, for
// /readyz, the refused binds and the pods' events.
func (s *State) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.up {
		return nil
	}
	return fmt.Errorf("the agent is not connected to the container runtime's NRI socket %s (%w): is NRI enabled in the runtime, and --nri-socket right?", s.socket, s.err)
}

func (s *State) set(up bool, err error) {
	s.mu.Lock()
	s.up, s.err = up, err
	// Changes only: a runtime that stays away is one event (the limits
	// and the broadcaster's series fold the rest), and the first
	// connection is no news.
	var tell event.Reason
	switch {
	case !up && s.told != event.NRIDisconnected:
		tell = event.NRIDisconnected
	case up && s.told == event.NRIDisconnected:
		tell = event.NRIConnected
	}
	if tell != "" {
		s.told = tell
	}
	s.mu.Unlock()
	s.connected(up)
	switch tell {
	case event.NRIDisconnected:
		s.events.Record(event.Node(s.node), tell, fmt.Sprintf("Not connected to the container runtime's NRI socket %s: %v", s.socket, err))
	case event.NRIConnected:
		s.events.Record(event.Node(s.node), tell, fmt.Sprintf("Connected to the container runtime's NRI socket %s again", s.socket))
	}
}

// Plugin adapts a Front to the NRI stub's calls.
type Plugin struct {
	f     Front
	log   *slog.Logger
	state *State
}

// NewPlugin is f as the runtime's plugin, its connection state.
func NewPlugin(f Front, state *State, log *slog.Logger) *Plugin {
	return &Plugin{f: f, log: log, state: state}
}

// sandboxOf reads the runtime's pod sandbox.
func sandboxOf(pod *api.PodSandbox) Sandbox {
	sb := Sandbox{UID: pod.GetUid(), Namespace: pod.GetNamespace(), Name: pod.GetName()}
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			sb.NetnsPath = ns.GetPath()
		}
	}
	return sb
}

// RunPodSandbox has the front end bind the pod's services to its new
// namespace. An error fails the sandbox, and the kubelet reports it on the
// pod.
func (p *Plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	sb := sandboxOf(pod)
	if err := p.f.Bind(ctx, sb); err != nil {
		p.log.Error("refusing pod sandbox", "pod", sb.Key(), "err", err)
		p.f.Refused(sb, "", err)
		return fmt.Errorf("slingshot: %w", err)
	}
	return nil
}

// CreateContainer refuses a container whose pod's services are not bound
// to its namespace, and sets the environment to name the services as
// they are.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	sb := sandboxOf(pod)
	env, err := p.f.Check(ctx, sb, Container{Name: ctr.GetName(), Env: ctr.GetEnv()})
	if err != nil {
		p.log.Error("refusing container", "pod", sb.Key(), "container", ctr.GetName(), "err", err)
		p.f.Refused(sb, ctr.GetName(), err)
		return nil, nil, fmt.Errorf("slingshot: %w", err)
	}
	if len(env) == 0 {
		return nil, nil, nil
	}
	adj := &api.ContainerAdjustment{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		adj.AddEnv(k, v)
	}
	return adj, nil, nil
}

// Synchronize, the runtime's first call on a new connection, has the
// front end bind or hold again the running pods' services. The connection
// counts as up from here.
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, containers []*api.Container) ([]*api.ContainerUpdate, error) {
	said := p.f.Synchronize(ctx, liveFirst(pods, containers))
	p.state.set(true, nil)
	p.log.Info("connected to the runtime's NRI socket", append([]any{"pods", len(pods)}, said...)...)
	return nil, nil
}

// liveFirst are the runtime's sandboxes, one per pod: the runtime lists a
// pod's sandboxes that are gone too (one made again while the agent was
// away leaves the old one, stopped, beside the new), and binding a pod's
// services to a dead sandbox's namespace would leave the running one
// unbound. A pod's sandbox with a running container wins, then one with a
// process, then the last listed.
func liveFirst(pods []*api.PodSandbox, containers []*api.Container) []Sandbox {
	running := map[string]bool{}
	for _, c := range containers {
		if c.GetState() == api.ContainerState_CONTAINER_RUNNING {
			running[c.GetPodSandboxId()] = true
		}
	}
	score := func(pod *api.PodSandbox) int {
		switch {
		case running[pod.GetId()]:
			return 2
		case pod.GetPid() != 0:
			return 1
		}
		return 0
	}
	best := map[string]*api.PodSandbox{}
	var order []string
	for _, pod := range pods {
		uid := pod.GetUid()
		cur, ok := best[uid]
		if !ok {
			order = append(order, uid)
		}
		if !ok || score(pod) >= score(cur) {
			best[uid] = pod
		}
	}
	out := make([]Sandbox, 0, len(order))
	for _, uid := range order {
		out = append(out, sandboxOf(best[uid]))
	}
	return out
}

// Run serves the runtime's NRI socket for f until ctx ends, connecting
// again (with a bounded backoff between attempts) when the runtime
// restarts; state follows the connection.
func Run(ctx context.Context, f Front, state *State, log *slog.Logger) error {
	p := NewPlugin(f, state, log)
	socket := state.socket
	retry := backoff.Policy{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Factor: 2, Jitter: 0.2}
	for attempt := 0; ; attempt++ {
		s, err := stub.New(p, stub.WithPluginName("slingshot"), stub.WithPluginIdx("50"), stub.WithSocketPath(socket))
		if err == nil {
			log.Info("connecting to the runtime's NRI socket", "socket", socket)
			err = s.Run(ctx)
		}
		if err == nil {
			err = errors.New("the runtime closed the connection")
		}
		state.set(false, err)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("NRI connection ended; connecting again", "socket", socket, "err", err)
		if err := backoff.Sleep(ctx, retry.Delay(min(attempt, 8))); err != nil {
			return nil
		}
	}
}
