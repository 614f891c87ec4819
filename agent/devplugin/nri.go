package devplugin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/nri"
)

// ErrNotBound refuses a container, at the runtime's CreateContainer,
// whose services are not bound to its pod's namespace.
var ErrNotBound = errors.New("the container's Slingshot services are not bound to its pod's network namespace")

// nriFront is the device plugin's side of the runtime's NRI calls
// (--deviceplugin-nri). The services are bound at PreStartContainer, as
// without NRI; CreateContainer, which the runtime calls after it, checks
// each container against the driver and sets the environment that names
// the services. The environment then does not travel through a CDI spec
// the runtime's cache may not have read yet: the race that
// cdispec.WaitVisible only narrows is gone.
type nriFront struct{ b *binder }

// Bind does nothing at RunPodSandbox: the kubelet calls PreStartContainer
// once the sandbox exists, and the pod is bound there.
func (nriFront) Bind(context.Context, nri.Sandbox) error { return nil }

// Synchronize has nothing to bind late: the start-up reconcile revived the
// running pods, and the next container of each is checked here.
func (nriFront) Synchronize(context.Context, []nri.Sandbox) []any { return nil }

func (n nriFront) Check(ctx context.Context, sb nri.Sandbox, ctr nri.Container) ([]string, error) {
	return n.b.check(ctx, sb, ctr)
}

// Refused tells the pod why its container was refused.
func (n nriFront) Refused(sb nri.Sandbox, container string, err error) {
	n.b.events.Record(event.Pod(sb.Namespace, sb.Name, sb.UID), event.BindRefused,
		fmt.Sprintf("Container %s was refused at its creation: %v", container, err))
}

// check refuses a container holding NICs of this agent (its
// SLINGSHOT_DEVICES, set at Allocate) unless its pod is bound and the
// driver shows a service on each of them, enabled, carrying the pod's VNI
// and admitting the sandbox's namespace alone; it returns the container's
// late-bound environment. A container holding none is not this agent's.
func (b *binder) check(ctx context.Context, sb nri.Sandbox, ctr nri.Container) ([]string, error) {
	devs := envValue(ctr.Env, engine.EnvDevices)
	if devs == "" {
		return nil, nil
	}
	nics := strings.Split(devs, ",")
	key := sb.Key()
	unlock := b.eng.Lock(key)
	defer unlock()
	rec, ok := b.eng.Get(key)
	if !ok || rec.UID != sb.UID {
		return nil, fmt.Errorf("%w: container %s holds %s, but pod %s (UID %s) was not bound on this node (did PreStartContainer run?)",
			ErrNotBound, ctr.Name, devs, key, sb.UID)
	}
	if rec.Netns == 0 && b.policy().fallback != nil {
		// Bound to the configured fallback UID or GID: no namespace to
		// check, as the admin accepted.
		return b.eng.Env(rec, nics), nil
	}
	if sb.NetnsPath == "" {
		return nil, fmt.Errorf("%w: pod %s has no network namespace of its own (hostNetwork); a service admitting the host's namespace would admit every host process",
			ErrNotBound, key)
	}
	ns, err := b.openNetns(sb.NetnsPath)
	if err != nil {
		return nil, fmt.Errorf("%w: pod %s: %w", ErrNotBound, key, err)
	}
	inode := ns.Inode()
	_ = ns.Close()
	if err := b.eng.Check(ctx, key, nics, inode); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotBound, err)
	}
	return b.eng.Env(rec, nics), nil
}

// envValue is key's value in env ("K=V"), the last one set; "" if unset.
func envValue(env []string, key string) string {
	var v string
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
