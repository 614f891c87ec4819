package dra

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// DefaultDriverName is the driver's name: its DeviceClasses, ResourceSlices
// and claims' configuration use it.
const DefaultDriverName = "cxi.slingshot.hpe.com"

// DriverConfig is what Start needs.
type DriverConfig struct {
	Driver string
	Node   string
	// KubeletDir is the kubelet's directory: the registration socket goes
	// in plugins_registry/, the DRA socket in plugins/<driver>/.
	KubeletDir string
	Kube       kubernetes.Interface
	Manager    *Manager
	Logger     *slog.Logger
	// Fatal is called with an error that should stop the agent.
	Fatal func(error)
}

// Driver is the registered kubelet plugin.
type Driver struct {
	helper *kubeletplugin.Helper
	driver string
	node   string
}

// Start registers the driver with the kubelet and serves its calls until
// Stop. The calls are not serialized: the Manager orders the steps of
// each claim itself.
func Start(ctx context.Context, cfg DriverConfig) (*Driver, error) {
	registry, data, err := pluginDirs(cfg.KubeletDir, cfg.Driver)
	if err != nil {
		return nil, err
	}
	plugin := &kubeletPlugin{m: cfg.Manager, log: cfg.Logger, fatal: cfg.Fatal}
	h, err := kubeletplugin.Start(ctx, plugin,
		kubeletplugin.DriverName(cfg.Driver),
		kubeletplugin.NodeName(cfg.Node),
		kubeletplugin.KubeClient(cfg.Kube),
		kubeletplugin.RegistrarDirectoryPath(registry),
		kubeletplugin.PluginDataDirectoryPath(data),
		kubeletplugin.Serialize(false),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return nil, fmt.Errorf("start DRA kubelet plugin %s: %w", cfg.Driver, err)
	}
	return &Driver{helper: h, driver: cfg.Driver, node: cfg.Node}, nil
}

// pluginDirs makes, where the kubelet has not yet, the directories the
// plugin's sockets go in: the kubelet's plugin registry and the driver's
// own plugins/<driver>/, which the kubelet never makes.
func pluginDirs(kubeletDir, driver string) (registry, data string, err error) {
	registry = filepath.Join(kubeletDir, "plugins_registry")
	data = filepath.Join(kubeletDir, "plugins", driver)
	for _, d := range []string{registry, data} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return "", "", fmt.Errorf("DRA kubelet plugin directory: %w", err)
		}
	}
	return registry, data, nil
}

// Publish replaces the node's ResourceSlice with devs.
func (d *Driver) Publish(ctx context.Context, devs []resourceapi.Device) error {
	for _, dev := range devs {
		if err := checkDeviceName(dev.Name); err != nil {
			return err
		}
	}
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.node: {Slices: []resourceslice.Slice{{Devices: devs}}},
	}}
	if err := d.helper.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("publish ResourceSlice: %w", err)
	}
	return nil
}

// Stop stops serving the kubelet. The ResourceSlice stays: a restarting
// agent publishes it again, and pods keep running meanwhile.
func (d *Driver) Stop() { d.helper.Stop() }

// Registered reports whether the kubelet has accepted the driver.
func (d *Driver) Registered() bool {
	st := d.helper.RegistrationStatus()
	return st != nil && st.PluginRegistered
}
