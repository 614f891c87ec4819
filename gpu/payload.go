package gpu

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Environment variables and CDI kinds of the GPU runtimes.
const (
	// EnvNVIDIAVisibleDevices is read on the host by the NVIDIA Container
	// Toolkit's runtime hook, which injects those GPUs and the driver's
	// libraries: NVML indices or GPU UUIDs, comma-separated.
	EnvNVIDIAVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvROCRVisibleDevices is read in the container by ROCm's runtime:
	// indices of the GPUs it can see, or "GPU-<unique_id>" UUIDs.
	EnvROCRVisibleDevices = "ROCR_VISIBLE_DEVICES"
	// EnvHIPVisibleDevices is read in the container by HIP: indices into
	// what ROCm exposes.
	EnvHIPVisibleDevices = "HIP_VISIBLE_DEVICES"
	// CDIKindNVIDIA is the kind of the specs nvidia-ctk cdi generate
	// writes; its devices are named by NVML index ("nvidia.com/gpu=0") and,
	// by default since the toolkit generates both strategies, by UUID
	// ("nvidia.com/gpu=GPU-..."), plus "all".
	CDIKindNVIDIA = "nvidia.com/gpu"
	// CDIKindAMD is the kind of the spec amd-ctk cdi generate writes; its
	// devices are named by index only ("amd.com/gpu=0"): the position of
	// the GPU among the amdgpu-bound PCI functions in address order, plus
	// "all".
	CDIKindAMD = "amd.com/gpu"
)

// Selector says how GPUs are named to the runtime.
type Selector int

const (
	// ByIndex names GPUs by [GPU.Index].
	ByIndex Selector = iota
	// ByUUID names GPUs by [GPU.UUID] where the runtime takes UUIDs
	// (NVIDIA_VISIBLE_DEVICES, nvidia-ctk CDI names, ROCR_VISIBLE_DEVICES).
	// It is immune to index shifts when a GPU drops off the bus.
	ByUUID
)

// PayloadOptions tune [Carving.Payload].
type PayloadOptions struct {
	// DevRoot is the host directory of the device nodes; default "/dev".
	// Container paths are always under /dev.
	DevRoot string
	// CDI names the GPUs as devices of the vendor's CDI spec (which the
	// NVIDIA or AMD container toolkit generates on the node) instead of
	// returning device nodes.
	CDI bool
	// Select names GPUs by index or UUID.
	Select Selector
	// DevFS, when set, is the dev root as a file system: every device node
	// returned must exist in it, so a missing one fails here rather than
	// in the container runtime.
	DevFS fs.FS
}

// DeviceNode is one device node to create in the container.
type DeviceNode struct {
	// HostPath is below PayloadOptions.DevRoot; ContainerPath below /dev.
	HostPath, ContainerPath string
	// Permissions is the cgroup access, "rw".
	Permissions string
}

// Payload is what a container holding some units gets.
type Payload struct {
	// Devices are the device nodes: each GPU's own, then the vendor's
	// shared ones. Empty with CDI.
	Devices []DeviceNode
	// CDIDevices are fully qualified CDI device names; empty without CDI.
	CDIDevices []string
	// Env selects the GPUs in the runtimes.
	//
	// NVIDIA without CDI: NVIDIA_VISIBLE_DEVICES with the host's indices or
	// UUIDs (the NVIDIA runtime hook reads it on the host). With CDI
	// nothing: nvidia-ctk's spec sets it itself.
	//
	// AMD, with or without CDI: the container sees only the GPUs whose
	// render nodes it has, renumbered from 0, so ROCR_VISIBLE_DEVICES holds
	// the GPUs' UUIDs when selecting by UUID and every GPU has one, else
	// the container's own indices 0..n-1; HIP_VISIBLE_DEVICES is always
	// 0..n-1.
	Env map[string]string
	// GPUs are the PCI addresses of the GPUs, sorted.
	GPUs []string
	// NICs are the units' Slingshot NICs ("cxi0"), each once, in unit
	// order; the agent binds them as it does the NIC resource's.
	NICs []string
}

// Payload returns what a container holding the units ids gets. It returns
// an error wrapping [ErrUnknownUnit] for an ID the carving does not hold,
// [ErrNoDeviceNode] for a GPU without a device node (or one missing from
// opts.DevFS), [ErrNoUUID] when selecting NVIDIA GPUs by a UUID that is
// unknown, and a plain error for an empty or repeating ID list. It is pure
// apart from the optional DevFS checks.
func (c *Carving) Payload(ids []string, opts PayloadOptions) (*Payload, error) {
	if len(ids) == 0 {
		return nil, errors.New("gpu payload: no unit IDs")
	}
	units := make([]*Unit, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			return nil, fmt.Errorf("gpu payload: unit %q listed twice", id)
		}
		seen[id] = true
		u, ok := c.Unit(id)
		if !ok {
			return nil, fmt.Errorf("gpu payload: %w %q", ErrUnknownUnit, id)
		}
		units = append(units, u)
	}
	return BuildPayload(units, opts)
}

// BuildPayload is [Carving.Payload] for units already looked up.
func BuildPayload(units []*Unit, opts PayloadOptions) (*Payload, error) {
	devRoot := cmp.Or(opts.DevRoot, "/dev")
	p := &Payload{Env: map[string]string{}}
	var gpus []*GPU
	nicSeen := map[string]bool{}
	for _, u := range units {
		for i := range u.GPUs {
			gpus = append(gpus, &u.GPUs[i])
		}
		for _, n := range u.NICs {
			if !nicSeen[n.Name] {
				nicSeen[n.Name] = true
				p.NICs = append(p.NICs, n.Name)
			}
		}
	}
	slices.SortFunc(gpus, func(a, b *GPU) int { return strings.Compare(a.PCIAddress, b.PCIAddress) })
	gpus = slices.CompactFunc(gpus, func(a, b *GPU) bool { return a.PCIAddress == b.PCIAddress })
	if len(gpus) == 0 {
		return nil, errors.New("gpu payload: the units hold no GPUs")
	}
	vendor := gpus[0].Vendor
	for _, g := range gpus {
		if g.Vendor != vendor {
			return nil, fmt.Errorf("gpu payload: GPUs of %s and %s in one request", vendor, g.Vendor)
		}
		p.GPUs = append(p.GPUs, g.PCIAddress)
	}

	if !opts.CDI {
		var shared []string
		for _, g := range gpus {
			if len(g.DevNodes) == 0 {
				return nil, fmt.Errorf("gpu payload: GPU %s: %w", g.PCIAddress, ErrNoDeviceNode)
			}
			for _, rel := range g.DevNodes {
				p.Devices = append(p.Devices, deviceNode(devRoot, rel))
			}
			for _, rel := range g.SharedDevNodes {
				if !slices.Contains(shared, rel) {
					shared = append(shared, rel)
				}
			}
		}
		for _, rel := range shared {
			p.Devices = append(p.Devices, deviceNode(devRoot, rel))
		}
		if opts.DevFS != nil {
			for _, d := range p.Devices {
				rel := strings.TrimPrefix(d.ContainerPath, "/dev/")
				if _, err := fs.Stat(opts.DevFS, rel); err != nil {
					return nil, fmt.Errorf("gpu payload: %s: %w: %w", d.HostPath, ErrNoDeviceNode, err)
				}
			}
		}
	}

	switch vendor {
	case NVIDIA:
		names := make([]string, len(gpus))
		for i, g := range gpus {
			names[i] = strconv.Itoa(g.Index)
			if opts.Select == ByUUID {
				if g.UUID == "" {
					return nil, fmt.Errorf("gpu payload: GPU %s: %w", g.PCIAddress, ErrNoUUID)
				}
				names[i] = g.UUID
			}
		}
		if opts.CDI {
			for _, n := range names {
				p.CDIDevices = append(p.CDIDevices, CDIKindNVIDIA+"="+n)
			}
		} else {
			p.Env[EnvNVIDIAVisibleDevices] = strings.Join(names, ",")
		}
	case AMD:
		local := make([]string, len(gpus))
		uuids := make([]string, len(gpus))
		allUUIDs := true
		for i, g := range gpus {
			local[i] = strconv.Itoa(i)
			uuids[i] = g.UUID
			allUUIDs = allUUIDs && g.UUID != ""
			if opts.CDI {
				p.CDIDevices = append(p.CDIDevices, CDIKindAMD+"="+strconv.Itoa(g.Index))
			}
		}
		p.Env[EnvROCRVisibleDevices] = strings.Join(local, ",")
		if opts.Select == ByUUID && allUUIDs {
			p.Env[EnvROCRVisibleDevices] = strings.Join(uuids, ",")
		}
		p.Env[EnvHIPVisibleDevices] = strings.Join(local, ",")
	}
	return p, nil
}

func deviceNode(devRoot, rel string) DeviceNode {
	return DeviceNode{
		HostPath:      filepath.Join(devRoot, filepath.FromSlash(rel)),
		ContainerPath: "/dev/" + rel,
		Permissions:   "rw",
	}
}
