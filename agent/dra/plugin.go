package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/slingshot-k8s/slingshot/agent/event"
)

// kubeletPlugin answers the kubelet's DRA calls, through the helper of
// k8s.io/dynamic-resource-allocation/kubeletplugin, with the Manager.
type kubeletPlugin struct {
	m   *Manager
	log *slog.Logger
	// fatal stops the agent on an error the helper cannot recover from.
	fatal func(error)
}

var _ kubeletplugin.DRAPlugin = (*kubeletPlugin)(nil)

// PrepareResourceClaims prepares each claim on its own: one claim's
// failure leaves the others prepared, and the kubelet retries it alone.
func (p *kubeletPlugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := p.m.Prepare(ctx, c)
		if err != nil {
			p.log.Error("prepare claim", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
			// The kubelet's event names the claim's driver and little
			// else: the pods waiting on it are told why.
			for _, pod := range podsOf(c) {
				p.m.cfg.Events.Record(event.Pod(pod.Namespace, pod.Name, pod.UID), event.BindRefused,
					fmt.Sprintf("Preparing ResourceClaim %s/%s failed: %v", c.Namespace, c.Name, err))
			}
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs, Err: err}
	}
	return out, nil
}

// UnprepareResourceClaims unprepares each claim on its own.
func (p *kubeletPlugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := p.m.Unprepare(ctx, string(c.UID))
		if err != nil {
			p.log.Error("unprepare claim", "claim", c.String(), "uid", c.UID, "err", err)
		}
		out[c.UID] = err
	}
	return out, nil
}

// HandleError logs the helper's background errors (publishing the
// ResourceSlice) and stops the agent on those that retrying cannot mend.
func (p *kubeletPlugin) HandleError(_ context.Context, err error, msg string) {
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		p.log.Warn("DRA helper: "+msg, "err", err)
		return
	}
	p.log.Error("DRA helper: "+msg+"; stopping", "err", err)
	p.fatal(err)
}

// WatchHealthStatus is not used: a NIC's health is its device taint in
// the ResourceSlice, which the scheduler reads too.
func (p *kubeletPlugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
