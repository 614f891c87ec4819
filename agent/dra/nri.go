package dra

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

// nriPlugin is the agent as a plugin of the container runtime's Node
// Resource Interface: it binds at RunPodSandbox and guards CreateContainer.
type nriPlugin struct {
	m     *Manager
	log   *slog.Logger
	state *NRIState
}

// NRIState is the agent's connection to the runtime's NRI socket. Without
// it nothing binds a claim's services when its pod's sandbox starts, so
// the agent is not ready and Prepare is refused (ManagerConfig.BindReady)
// until it is up. Safe for concurrent use.
type NRIState struct {
	socket string
	m      *Metrics
	events Events
	node   string

	mu        sync.Mutex // guards the fields below
	connected bool
	err       error // why it is not connected
	// told is what the node was last told: "" nothing yet, else
	// the reason of the last event.
	told event.Reason
}

// NewNRIState is the state of a connection to socket not made yet.
func NewNRIState(socket string, m *Metrics) *NRIState {
	m.setNRIConnected(false)
	return &NRIState{socket: socket, m: m, events: event.Nop{}, err: errors.New("not connected yet")}
}

// WithEvents makes s tell node of each loss of the connection, and of
// each reconnection after one; call it before the connection is run.
func (s *NRIState) WithEvents(ev Events, node string) *NRIState {
	s.events, s.node = ev, node
	return s
}

// Ready is nil while connected, else an error saying why not, for
// /readyz, Prepare's refusal and the pod's event.
func (s *NRIState) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connected {
		return nil
	}
	return fmt.Errorf("the agent is not connected to the container runtime's NRI socket %s (%w): is NRI enabled in the runtime, and --nri-socket right?", s.socket, s.err)
}

func (s *NRIState) set(connected bool, err error) {
	s.mu.Lock()
	s.connected, s.err = connected, err
	// Changes only: a runtime that stays away is one event (the limits
	// and the broadcaster's series fold the rest), and the first
	// connection is no news.
	var tell event.Reason
	switch {
	case !connected && s.told != event.NRIDisconnected:
		tell = event.NRIDisconnected
	case connected && s.told == event.NRIDisconnected:
		tell = event.NRIConnected
	}
	if tell != "" {
		s.told = tell
	}
	s.mu.Unlock()
	s.m.setNRIConnected(connected)
	switch tell {
	case event.NRIDisconnected:
		s.events.Record(event.Node(s.node), tell, fmt.Sprintf("Not connected to the container runtime's NRI socket %s: %v", s.socket, err))
	case event.NRIConnected:
		s.events.Record(event.Node(s.node), tell, fmt.Sprintf("Connected to the container runtime's NRI socket %s again", s.socket))
	}
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

// RunPodSandbox binds the pod's claims to its new namespace. An error
// fails the sandbox, and the kubelet reports it on the pod.
func (p *nriPlugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if err := p.m.Bind(ctx, sandboxOf(pod)); err != nil {
		p.log.Error("refusing pod sandbox", "pod", pod.GetNamespace()+"/"+pod.GetName(), "err", err)
		p.m.cfg.Events.Record(event.Pod(pod.GetNamespace(), pod.GetName(), pod.GetUid()), refusalReason(err),
			fmt.Sprintf("The pod's sandbox was refused: %v", err))
		return fmt.Errorf("slingshot: %w", err)
	}
	return nil
}

// CreateContainer refuses a container whose pod's services are not bound
// to its namespace, and sets the environment to name the services as
// they are.
func (p *nriPlugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	env, err := p.m.Check(ctx, sandboxOf(pod), ctr.GetEnv())
	if err != nil {
		p.log.Error("refusing container", "pod", pod.GetNamespace()+"/"+pod.GetName(), "container", ctr.GetName(), "err", err)
		p.m.cfg.Events.Record(event.Pod(pod.GetNamespace(), pod.GetName(), pod.GetUid()), refusalReason(err),
			fmt.Sprintf("Container %s was refused: %v", ctr.GetName(), err))
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

// Synchronize, the runtime's first call on a new connection, holds again
// the namespaces of the running pods' bound claims and binds the prepared
// claims of pods whose sandbox started while the agent was not connected.
// The connection counts as up from here.
func (p *nriPlugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, containers []*api.Container) ([]*api.ContainerUpdate, error) {
	sbs := liveFirst(pods, containers)
	rep := p.m.Synchronize(ctx, sbs)
	p.state.set(true, nil)
	p.log.Info("connected to the runtime's NRI socket", "pods", len(pods), "claims_held", rep.Held, "claims_bound_late", rep.Bound, "claims_failed", rep.Failed)
	return nil, nil
}

// liveFirst are the runtime's sandboxes for Manager.Synchronize, one per
// pod: the runtime lists a pod's sandboxes that are gone too (one made
// again while the agent was away leaves the old one, stopped, beside the
// new), and binding a claim to a dead sandbox's namespace would leave the
// running one unbound. A pod's sandbox with a running container wins, then
// one with a process, then the last listed.
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

// RunNRI serves the runtime's NRI socket until ctx ends, connecting again
// (with a bounded backoff between attempts) when the runtime restarts;
// state follows the connection.
func RunNRI(ctx context.Context, m *Manager, state *NRIState, log *slog.Logger) error {
	p := &nriPlugin{m: m, log: log, state: state}
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
