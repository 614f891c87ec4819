// Package cdispec writes the Container Device Interface specs that carry
// a container's late-bound Slingshot values (SLINGSHOT_VNIS,
// SLINGSHOT_SVC_IDS) into the container.
//
// Allocate runs before the pod exists, so it can only name a CDI device;
// PreStartContainer, which runs after the sandbox exists and before the
// container is created, writes that device's spec. The container runtime
// resolves CDI names when it creates the container, so the values are in
// place before any user code runs. Specs are transient: one file per
// allocation, removed when the pod's services are.
//
// A written spec is not at once a resolvable one. containerd and CRI-O
// resolve CDI names through the CDI library's cache in its auto-refresh
// mode: it rescans the spec directories when its fsnotify watch reports a
// change, and its Refresh, which containerd calls before injecting, does
// not rescan in that mode. So a spec written at PreStartContainer can be
// missing from the runtime's cache when the kubelet's CreateContainer
// follows a moment later, and the container fails with "unresolvable CDI
// devices" until the kubelet retries it after its back-off (seen on the
// real node in a burst of 30 pods: the runtime still lacked a spec 83 ms
// after it was written, each event making it rescan every spec). With
// [WaitVisible] the Writer keeps a cache of its own that refreshes the
// same way from the same events, and Write returns once that cache holds
// the device with the edits written: the runtime's, fed the same events,
// has then most likely caught up too. It narrows the window and cannot
// close it; when the runtime is later still, the container fails closed
// and is retried.
package cdispec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// Writer writes and removes the specs of one resource's devices.
// It is safe for concurrent use: each spec is its own file, written
// atomically by the CDI library.
type Writer struct {
	cache  *cdi.Cache
	kind   string // "hpe.com/cxi": vendor/class
	vendor string
	class  string

	// view is the runtime's view of the directory, nil without
	// WaitVisible; waitFor bounds a wait on it and observe is told of
	// each.
	view    *cdi.Cache
	waitFor time.Duration
	observe func(took time.Duration, visible bool)
}

// Option configures a Writer.
type Option func(*Writer)

// WaitVisible makes Write wait, up to timeout, until a cache that
// refreshes as the container runtime's does holds the written device
// (the package comment says why), and tells observe how long it took and
// whether it got there. Close stops the cache's watch.
func WaitVisible(timeout time.Duration, observe func(took time.Duration, visible bool)) Option {
	return func(w *Writer) { w.waitFor, w.observe = timeout, observe }
}

// New returns a Writer that writes into dir the specs of kind, which is
// the device-plugin resource name ("hpe.com/cxi" gives vendor "hpe.com",
// class "cxi").
func New(dir, kind string, opts ...Option) (*Writer, error) {
	vendor, class, ok := strings.Cut(kind, "/")
	if !ok || vendor == "" || class == "" {
		return nil, fmt.Errorf("cdi kind %q is not vendor/class", kind)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("cdi cache %s: %w", dir, err)
	}
	w := &Writer{cache: cache, kind: kind, vendor: vendor, class: class}
	for _, o := range opts {
		o(w)
	}
	if w.waitFor > 0 {
		// Auto-refresh, as the runtimes configure the library. A bad
		// spec file (another vendor's) is kept in the cache's own
		// errors, as the runtime's cache keeps it, not returned here.
		if w.view, err = cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(true)); err != nil {
			return nil, fmt.Errorf("cdi cache %s (auto-refresh): %w", dir, err)
		}
	}
	return w, nil
}

// Close stops the watch of WaitVisible's cache, after the last Write: a
// Write after it waits its whole timeout.
func (w *Writer) Close() error {
	if w.view == nil {
		return nil
	}
	return w.view.Configure(cdi.WithAutoRefresh(false))
}

// AllocationKey names the allocation of a set of device IDs: the same
// IDs, in any order, give the same key. It is what both Allocate and
// PreStartContainer can compute, since both see only device IDs.
func AllocationKey(deviceIDs []string) string {
	ids := slices.Clone(deviceIDs)
	slices.Sort(ids)
	sum := sha256.Sum256([]byte(strings.Join(ids, "\x00")))
	return hex.EncodeToString(sum[:8])
}

// DeviceName returns the fully qualified CDI device name of an
// allocation, as Allocate returns it to the kubelet.
func (w *Writer) DeviceName(key string) string { return w.kind + "=" + key }

// Edits are what a container gets from its allocation's spec.
type Edits struct {
	// Env is "NAME=value" entries.
	Env []string
	// DeviceNodes are host device paths (<dev-root>/cxiN); each is mapped
	// at /dev/<name> in the container, whatever the host's dev root.
	DeviceNodes []string
}

// Write writes (or replaces) the spec of an allocation.
func (w *Writer) Write(key string, edits Edits) error {
	dev := cdispecs.Device{Name: key, ContainerEdits: cdispecs.ContainerEdits{Env: edits.Env}}
	for _, n := range edits.DeviceNodes {
		node := &cdispecs.DeviceNode{Path: "/dev/" + filepath.Base(n)}
		if node.Path != n {
			node.HostPath = n
		}
		dev.ContainerEdits.DeviceNodes = append(dev.ContainerEdits.DeviceNodes, node)
	}
	spec := &cdispecs.Spec{Version: cdispecs.CurrentVersion, Kind: w.kind, Devices: []cdispecs.Device{dev}}
	version, err := cdispecs.MinimumRequiredVersion(spec)
	if err != nil {
		return fmt.Errorf("cdi spec version: %w", err)
	}
	spec.Version = version
	if err := w.cache.WriteSpec(spec, w.specName(key)); err != nil {
		return fmt.Errorf("write cdi spec %s: %w", key, err)
	}
	if w.view != nil {
		took, visible := w.waitVisible(key, dev)
		if w.observe != nil {
			w.observe(took, visible)
		}
	}
	return nil
}

// How often waitVisible looks, the CDI library telling no one of its
// refreshes: from firstPoll (a refresh takes about a tenth of a
// millisecond with few specs), doubling up to maxPoll.
const (
	firstPoll = 50 * time.Microsecond
	maxPoll   = 2 * time.Millisecond
)

// waitVisible waits, up to waitFor, until the view holds key's device as
// dev: present, and with the edits just written (a rewrite replaces a
// device the view already has).
func (w *Writer) waitVisible(key string, dev cdispecs.Device) (time.Duration, bool) {
	want, err := json.Marshal(dev)
	if err != nil {
		return 0, false
	}
	start := time.Now()
	name := w.DeviceName(key)
	for poll := firstPoll; ; poll = min(2*poll, maxPoll) {
		if d := w.view.GetDevice(name); d != nil {
			if got, err := json.Marshal(d.Device); err == nil && bytes.Equal(got, want) {
				return time.Since(start), true
			}
		}
		if time.Since(start) >= w.waitFor {
			return time.Since(start), false
		}
		time.Sleep(poll)
	}
}

// Remove deletes an allocation's spec; a missing one is not an error.
func (w *Writer) Remove(key string) error {
	if err := w.cache.RemoveSpec(w.specName(key)); err != nil {
		return fmt.Errorf("remove cdi spec %s: %w", key, err)
	}
	return nil
}

func (w *Writer) specName(key string) string {
	return cdi.GenerateTransientSpecName(w.vendor, w.class, key) + ".json"
}
