package kubectlplugin

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

// VNIs is the vnis view: every lease, and the VNIs in quarantine.
type VNIs struct {
	Leases     []Lease      `json:"leases"`
	Quarantine []Quarantine `json:"quarantine"`
}

// BuildVNIs orders leases and quarantines by VNI.
func BuildVNIs(leases []Lease, quarantine []Quarantine) VNIs {
	v := VNIs{Leases: slices.Clone(leases), Quarantine: slices.Clone(quarantine)}
	if v.Leases == nil {
		v.Leases = []Lease{}
	}
	if v.Quarantine == nil {
		v.Quarantine = []Quarantine{}
	}
	sortLeases(v.Leases)
	slices.SortFunc(v.Quarantine, func(a, b Quarantine) int { return cmp.Compare(a.VNI, b.VNI) })
	return v
}

// PodView is the pod view: what the agent on the pod's node holds for it,
// joined with the controller's lease and the pod's ResourceClaims.
type PodView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Node      string `json:"node"`
	// Agent is the agent pod that answered, namespace/name.
	Agent string `json:"agent"`
	VNI   uint16 `json:"vni"`
	Scope string `json:"scope"`
	// State is the agent's: running or cleaning up for a device-plugin
	// pod, a DRA claim's state (bound, prepared, ...) otherwise.
	State string   `json:"state"`
	NICs  []string `json:"nics"`
	// HSN is the pod's hsn interface as the agent names it, e.g.
	// "hsn0 10.150.3.7/16 on hsn0".
	HSN string `json:"hsn,omitempty"`
	// Addresses are the high-speed-network addresses handed out to the pod.
	Addresses []string `json:"addresses,omitempty"`
	// Collectives is the job's hardware-collectives reservation at the
	// fabric manager (FI_CXI_COLL_JOB_ID), "" when it has none.
	Collectives string `json:"collectives,omitempty"`
	// Services are the pod's CXI services, one per NIC.
	Services []inspect.Service `json:"services"`
	// Claims are the DRA claims the agent prepared for the pod.
	Claims []inspect.Claim `json:"claims,omitempty"`
	// ResourceClaims are the pod's ResourceClaims as the API server
	// allocated them.
	ResourceClaims []ResourceClaim `json:"resourceClaims,omitempty"`
	// Lease is the controller's lease of the VNI, when the controller
	// keeps it in the Kubernetes API and it could be read.
	Lease *Lease `json:"lease,omitempty"`
	// Notes say what could not be joined, and why.
	Notes []string `json:"notes,omitempty"`
}

// ResourceClaim is one of the pod's ResourceClaims.
type ResourceClaim struct {
	Name string `json:"name"`
	// Devices are the allocated devices, driver/pool/device.
	Devices []string `json:"devices"`
}

// BuildPod joins what the agent reported about pod with the leases and
// the pod's ResourceClaims. It returns an error wrapping ErrNotServed when
// the report holds neither the pod nor a claim bound to it.
func BuildPod(pod *corev1.Pod, agent *corev1.Pod, rep *inspect.Report, leases []Lease, claims []resourcev1.ResourceClaim) (*PodView, error) {
	key := pod.Namespace + "/" + pod.Name
	v := &PodView{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Node: pod.Spec.NodeName,
		Agent: agent.Namespace + "/" + agent.Name, NICs: []string{}, Services: []inspect.Service{}}

	claimNames := map[string]bool{}
	for _, rc := range claims {
		claimNames[rc.Name] = true
		v.ResourceClaims = append(v.ResourceClaims, resourceClaimView(rc))
	}
	for _, c := range rep.Claims {
		if (c.BoundPod != "" && c.BoundPod == string(pod.UID)) || (c.Namespace == pod.Namespace && claimNames[c.Name]) {
			v.Claims = append(v.Claims, c)
		}
	}
	i := slices.IndexFunc(rep.Pods, func(p inspect.Pod) bool {
		if p.UID != "" && pod.UID != "" {
			return p.UID == string(pod.UID)
		}
		return p.Namespace == pod.Namespace && p.Name == pod.Name
	})
	switch {
	case i >= 0:
		p := rep.Pods[i]
		v.VNI, v.Scope, v.State, v.HSN, v.Collectives = p.VNI, p.Scope, p.State, p.HSN, p.Collectives
		v.NICs = append(v.NICs, p.NICs...)
	case len(v.Claims) > 0:
		c := v.Claims[0]
		v.VNI, v.Scope, v.State, v.Collectives = c.VNI, c.Scope, c.State, c.Collectives
		for _, c := range v.Claims {
			v.NICs = append(v.NICs, c.Devices...)
		}
	default:
		return nil, fmt.Errorf("pod %s on node %s (agent %s): %w", key, v.Node, v.Agent, ErrNotServed)
	}

	// The device plugin's services name their pod; a claim's services are
	// named by the claim, as NIC:ID.
	claimSvc := map[string]bool{}
	for _, c := range v.Claims {
		for _, s := range c.Services {
			id, _, _ := strings.Cut(s, "@")
			claimSvc[id] = true
		}
	}
	for _, s := range rep.Services {
		if s.Pod == key || claimSvc[s.NIC+":"+strconv.FormatUint(uint64(s.ID), 10)] {
			v.Services = append(v.Services, s)
		}
	}
	if rep.IPAM != nil {
		for _, a := range rep.IPAM.Allocations {
			if a.Pod == key {
				v.Addresses = append(v.Addresses, a.Address.String()+" ("+a.Pool+")")
			}
		}
	}

	for i := range leases {
		if leases[i].VNI == v.VNI {
			l := leases[i]
			v.Lease = &l
			break
		}
	}
	if v.Lease == nil && leases != nil {
		v.Notes = append(v.Notes, fmt.Sprintf("no VNILease holds VNI %d: a pod-scoped VNI from the node's pool has none", v.VNI))
	}
	return v, nil
}

func resourceClaimView(rc resourcev1.ResourceClaim) ResourceClaim {
	v := ResourceClaim{Name: rc.Name, Devices: []string{}}
	if rc.Status.Allocation != nil {
		for _, r := range rc.Status.Allocation.Devices.Results {
			v.Devices = append(v.Devices, r.Driver+"/"+r.Pool+"/"+r.Device)
		}
	}
	return v
}

// NodeView is one node in the nodes view.
type NodeView struct {
	Name string `json:"name"`
	// Taints are the node's, key=value:Effect.
	Taints []string `json:"taints"`
	// Agent is the agent pod on the node, namespace/name; empty: none.
	Agent string `json:"agent,omitempty"`
	// Error says why the agent's report is missing, if it is.
	Error string `json:"error,omitempty"`
	// Report is the agent's, when it could be read.
	Report *inspect.Report `json:"report,omitempty"`
}

// BuildNodes joins each node with its agent and the agent's report (or
// the error that kept it), ordered by node name. agents and reports are
// keyed by node name.
func BuildNodes(nodes []corev1.Node, agents map[string]*corev1.Pod, reports map[string]*inspect.Report, errs map[string]error) []NodeView {
	out := make([]NodeView, 0, len(nodes))
	for _, n := range nodes {
		v := NodeView{Name: n.Name, Taints: []string{}, Report: reports[n.Name]}
		for _, t := range n.Spec.Taints {
			s := t.Key
			if t.Value != "" {
				s += "=" + t.Value
			}
			v.Taints = append(v.Taints, s+":"+string(t.Effect))
		}
		if a := agents[n.Name]; a != nil {
			v.Agent = a.Namespace + "/" + a.Name
		}
		if err := errs[n.Name]; err != nil {
			v.Error = err.Error()
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b NodeView) int { return strings.Compare(a.Name, b.Name) })
	return out
}
