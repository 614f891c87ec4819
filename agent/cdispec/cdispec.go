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
package cdispec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

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
}

// New returns a Writer that writes into dir the specs of kind, which is
// the device-plugin resource name ("hpe.com/cxi" gives vendor "hpe.com",
// class "cxi").
func New(dir, kind string) (*Writer, error) {
	vendor, class, ok := strings.Cut(kind, "/")
	if !ok || vendor == "" || class == "" {
		return nil, fmt.Errorf("cdi kind %q is not vendor/class", kind)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("cdi cache %s: %w", dir, err)
	}
	return &Writer{cache: cache, kind: kind, vendor: vendor, class: class}, nil
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
	return nil
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
