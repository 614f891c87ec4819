package checkpoint

import (
	"maps"
	"net/netip"
	"slices"
	"time"
)

// Kind is what holds a record's lease and services: a pod of the device
// plugin or a DRA ResourceClaim.
type Kind string

// The kinds of holder.
const (
	KindPod   Kind = "pod"
	KindClaim Kind = "claim"
)

// Holder is the one record type: what the agent did for one holder of
// fabric resources, a pod (device plugin) or a claim (DRA). The engine
// reads and writes the common part (lease, services, options, the
// namespace they admit); each front end keeps its own few fields beside
// it.
type Holder struct {
	Kind Kind `json:"kind"`
	// UID is the pod's or the claim's UID. A pod of the same name and
	// another UID is a different pod; a claim is keyed by its UID.
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`

	// VNI is the holder's primary VNI (SLINGSHOT_VNIS' first entry);
	// zero when it opted out of a VNI. Scope is whom it belongs to: "job",
	// "claim", "pod" or "none". LeaseKey names the lease at the
	// controller; Local marks a pod-scoped VNI from the node's own pool;
	// Released that the node's hold was given up.
	VNI      uint16 `json:"vni"`
	Scope    string `json:"scope,omitempty"`
	LeaseKey string `json:"leaseKey,omitempty"`
	Local    bool   `json:"local,omitempty"`
	Released bool   `json:"released,omitempty"`
	// CollEnv is the job's hardware-collectives environment
	// (engine.CollectivesEnv) as the lease brought it; empty for none.
	CollEnv []string `json:"collEnv,omitempty"`
	// Options are the service options the holder was admitted with; nil:
	// the node's defaults.
	Options *ServiceOptions `json:"options,omitempty"`
	// Services the agent created for the holder, one per NIC.
	Services []Service `json:"services,omitempty"`
	// Netns is the network namespace inode the services admit, recorded
	// before any service may admit it; zero while they are unbound, or
	// when a fallback UID/GID member was used.
	Netns   uint32    `json:"netns,omitempty"`
	Created time.Time `json:"created"`

	// The device plugin's pod.
	//
	// DeviceIDs are the device-plugin IDs allocated to the pod's
	// containers, by "container@resource".
	DeviceIDs map[string][]string `json:"deviceIDs,omitempty"`
	// Exited is set when the pod was seen gone and cleanup began; the
	// record stays until every service is destroyed and the VNI released.
	Exited *time.Time `json:"exited,omitempty"`
	// Network is the pod's network request (its slingshot.hpe.com/network
	// annotation, unparsed) as the controller passed it on with the lease.
	Network string `json:"network,omitempty"`
	// HSN is the hsn interface the agent put in the pod's namespace, from
	// the moment its address is allocated until it is removed and the
	// address released.
	HSN *HSNLink `json:"hsn,omitempty"`
	// MoreHSN are the pod's interfaces on its other NICs (multi-rail),
	// after HSN: kept apart so that an agent of before multi-rail, rolled
	// back to, still knows the first.
	MoreHSN []HSNLink `json:"moreHSN,omitempty"`

	// DRA's claim.
	//
	// Pods are the pods the claim is reserved for, as the last Prepare
	// saw them.
	Pods    []ClaimPod    `json:"pods,omitempty"`
	Config  ClaimConfig   `json:"config,omitzero"`
	Results []ClaimResult `json:"results,omitempty"`
	// BoundPod is the UID of the pod whose namespace the services admit,
	// BoundNetns the path the runtime named that namespace by, which a
	// restarted agent opens to hold it again.
	BoundPod   string `json:"boundPod,omitempty"`
	BoundNetns string `json:"boundNetns,omitempty"`
	// Prepared is set once the services and the CDI spec are complete;
	// Unpreparing when Unprepare began: nothing binds it any more.
	Prepared    bool `json:"prepared,omitempty"`
	Unpreparing bool `json:"unpreparing,omitempty"`
}

// Service is one CXI service on one NIC.
type Service struct {
	NIC  string   `json:"nic"`
	ID   uint32   `json:"id"`
	VNIs []uint16 `json:"vnis"`
	// Netns is the namespace inode the service admits; 0 while unbound.
	Netns uint32 `json:"netns,omitempty"`
}

// Is reports whether s is the service id on nic.
func (s Service) Is(nic string, id uint32) bool { return s.NIC == nic && s.ID == id }

// HSNLink is a pod's interface on the high-speed network.
type HSNLink struct {
	// Name is the interface's name in the pod, Parent the host's hsn
	// netdev it is a child of, Mode "macvlan" or "ipvlan".
	Name   string `json:"name"`
	Parent string `json:"parent"`
	Mode   string `json:"mode"`
	// Address is the pod's address with the pool's prefix length.
	Address netip.Prefix `json:"address"`
	// Owner keys the address at the agent's allocator.
	Owner string `json:"owner"`
	// MTU of the interface; 0 kept the parent's.
	MTU int `json:"mtu,omitempty"`
	// HardwareAddr is the interface's as the kernel gave it, last seen.
	HardwareAddr string `json:"hardwareAddr,omitempty"`
}

// ClaimPod names a pod a claim is reserved for.
type ClaimPod struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ClaimConfig is what the claim's CXIClaimConfig asked for.
type ClaimConfig struct {
	// VNI is whose VNI the services carry: job, pod, none or claim:NAME.
	VNI string `json:"vni,omitempty"`
	// EnvSuffix suffixes the claim's SLINGSHOT_* names.
	EnvSuffix string `json:"envSuffix,omitempty"`
}

// ClaimResult is one allocated device of the claim.
type ClaimResult struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	// ShareID names the claim's share of a device many claims share
	// (consumable capacity); "" for a device the claim has alone.
	ShareID string `json:"shareID,omitempty"`
}

// PodID is the record key of the pod namespace/name: the key the
// kubelet's PodResources API gives (it carries no UIDs).
func PodID(namespace, name string) string { return namespace + "/" + name }

// ClaimID is the record key of the claim uid, which is also its holder
// name at the lease holds.
func ClaimID(uid string) string { return "claim:" + uid }

// ID is the holder's key in the store.
func (h *Holder) ID() string {
	if h.Kind == KindClaim {
		return ClaimID(h.UID)
	}
	return PodID(h.Namespace, h.Name)
}

// Key is the holder's "namespace/name", for messages.
func (h *Holder) Key() string { return h.Namespace + "/" + h.Name }

// String names the holder for messages: "pod ns/name", "claim ns/name".
func (h *Holder) String() string { return string(h.Kind) + " " + h.Key() }

// ReservedFor reports whether the claim is bound or reserved for pod uid.
func (h *Holder) ReservedFor(uid string) bool {
	return h.BoundPod == uid || slices.ContainsFunc(h.Pods, func(p ClaimPod) bool { return p.UID == uid })
}

// Service returns the holder's service on nic.
func (h *Holder) Service(nic string) (Service, bool) {
	i := slices.IndexFunc(h.Services, func(s Service) bool { return s.NIC == nic })
	if i < 0 {
		return Service{}, false
	}
	return h.Services[i], true
}

// HSNLinks are the holder's hsn interfaces, in the order they were
// named.
func (h *Holder) HSNLinks() []HSNLink {
	if h.HSN == nil {
		return nil
	}
	return append([]HSNLink{*h.HSN}, h.MoreHSN...)
}

// SetHSNLinks records links as the holder's hsn interfaces.
func (h *Holder) SetHSNLinks(links []HSNLink) {
	h.HSN, h.MoreHSN = nil, nil
	if len(links) > 0 {
		first := links[0]
		h.HSN = &first
		h.MoreHSN = slices.Clone(links[1:])
	}
}

// Clone returns a deep copy of h.
func (h *Holder) Clone() Holder {
	c := *h
	c.CollEnv = slices.Clone(h.CollEnv)
	c.Options = h.Options.Clone()
	c.Services = make([]Service, len(h.Services))
	for i, s := range h.Services {
		c.Services[i] = s
		c.Services[i].VNIs = slices.Clone(s.VNIs)
	}
	if h.DeviceIDs != nil {
		c.DeviceIDs = make(map[string][]string, len(h.DeviceIDs))
		for k, v := range h.DeviceIDs {
			c.DeviceIDs[k] = slices.Clone(v)
		}
	}
	if h.Exited != nil {
		t := *h.Exited
		c.Exited = &t
	}
	if h.HSN != nil {
		l := *h.HSN
		c.HSN = &l
	}
	c.MoreHSN = slices.Clone(h.MoreHSN)
	c.Pods = slices.Clone(h.Pods)
	c.Results = slices.Clone(h.Results)
	return c
}

// IDs returns the keys of the holders in sorted order.
func (s *State) IDs() []string { return slices.Sorted(maps.Keys(s.Holders)) }
