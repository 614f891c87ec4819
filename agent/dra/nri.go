package dra

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// nriPlugin is the agent as a plugin of the container runtime's Node
// Resource Interface: it binds at RunPodSandbox and guards CreateContainer.
type nriPlugin struct {
	m   *Manager
	log *slog.Logger
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
		return fmt.Errorf("slingshot: %w", err)
	}
	return nil
}

// CreateContainer refuses a container whose pod's services are not bound
// to its namespace, and sets the environment to name the services as
// they are.
func (p *nriPlugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	env, err := p.m.Check(ctx, sandboxOf(pod))
	if err != nil {
		p.log.Error("refusing container", "pod", pod.GetNamespace()+"/"+pod.GetName(), "container", ctr.GetName(), "err", err)
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

// Synchronize holds again, after the agent or the runtime restarted, the
// namespaces of the running pods' bound claims.
func (p *nriPlugin) Synchronize(_ context.Context, pods []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	sbs := make([]Sandbox, 0, len(pods))
	for _, pod := range pods {
		sbs = append(sbs, sandboxOf(pod))
	}
	p.m.Resync(sbs)
	return nil, nil
}

// RunNRI serves the runtime's NRI socket until ctx ends, connecting again
// (with a bounded backoff between attempts) when the runtime restarts.
func RunNRI(ctx context.Context, m *Manager, socket string, log *slog.Logger) error {
	p := &nriPlugin{m: m, log: log}
	retry := backoff.Policy{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Factor: 2, Jitter: 0.2}
	for attempt := 0; ; attempt++ {
		s, err := stub.New(p, stub.WithPluginName("slingshot"), stub.WithPluginIdx("50"), stub.WithSocketPath(socket))
		if err == nil {
			log.Info("connecting to the runtime's NRI socket", "socket", socket)
			err = s.Run(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("NRI connection ended; connecting again", "socket", socket, "err", err)
		if err := backoff.Sleep(ctx, retry.Delay(min(attempt, 8))); err != nil {
			return nil
		}
	}
}
