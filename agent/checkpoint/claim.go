package checkpoint

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Claim is what the agent did for one DRA ResourceClaim (--api=dra): the
// DRA front end's record, kept in the same file, under the same rules, as
// the device plugin's pods.
type Claim struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods are the pods the claim is reserved for, as the last Prepare
	// saw them.
	Pods   []ClaimPod  `json:"pods,omitempty"`
	Config ClaimConfig `json:"config"`
	// Results are the driver's devices of the claim, in allocation order.
	Results []ClaimResult `json:"results"`
	// The lease: LeaseKey names it at the controller, Local marks a
	// pod-scoped VNI of the node's own pool, Released that the node's hold
	// was given up. VNI 0: the claim opted out (vni: none).
	LeaseKey string `json:"leaseKey,omitempty"`
	VNI      uint16 `json:"vni"`
	Scope    string `json:"scope,omitempty"`
	Local    bool   `json:"local,omitempty"`
	Released bool   `json:"released,omitempty"`
	// CollEnv is the job's hardware-collectives environment
	// (engine.CollectivesEnv) as the lease brought it; empty for none.
	CollEnv []string `json:"collEnv,omitempty"`
	// Services are the claim's services, one per NIC it was allocated.
	Services []ClaimService `json:"services,omitempty"`
	// BoundPod is the UID of the pod whose namespace the services admit,
	// BoundNetns the path the runtime named that namespace by, which a
	// restarted agent opens to hold it again.
	BoundPod   string `json:"boundPod,omitempty"`
	BoundNetns string `json:"boundNetns,omitempty"`
	// Prepared is set once the services and the CDI spec are complete.
	Prepared bool `json:"prepared,omitempty"`
	// Unpreparing is set when Unprepare began; nothing binds it any more.
	Unpreparing bool      `json:"unpreparing,omitempty"`
	Created     time.Time `json:"created"`
	// Options are the service options the claim was admitted with; nil:
	// the node's defaults.
	Options *ServiceOptions `json:"options,omitempty"`
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
}

// ClaimService is a CXI service made for a claim on one NIC.
type ClaimService struct {
	NIC string `json:"nic"`
	ID  uint32 `json:"id"`
	// Netns is the namespace inode the service admits; 0 while unbound.
	Netns uint32 `json:"netns,omitempty"`
}

// Key is the claim's "namespace/name".
func (c *Claim) Key() string { return c.Namespace + "/" + c.Name }

// ReservedFor reports whether the claim is bound or reserved for pod uid.
func (c *Claim) ReservedFor(uid string) bool {
	return c.BoundPod == uid || slices.ContainsFunc(c.Pods, func(p ClaimPod) bool { return p.UID == uid })
}

// Clone returns a deep copy of c.
func (c *Claim) Clone() *Claim {
	d := *c
	d.Pods = slices.Clone(c.Pods)
	d.Results = slices.Clone(c.Results)
	d.Services = slices.Clone(c.Services)
	d.Options = c.Options.Clone()
	return &d
}

// Claim returns a copy of the record of claim uid.
func (s *Store) Claim(uid string) (*Claim, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.state.Claims[uid]
	if c == nil {
		return nil, false
	}
	return c.Clone(), true
}

// Claims returns copies of every claim record, by UID.
func (s *Store) Claims() []*Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Claim, 0, len(s.state.Claims))
	for _, uid := range slices.Sorted(maps.Keys(s.state.Claims)) {
		out = append(out, s.state.Claims[uid].Clone())
	}
	return out
}

// PutClaim records c, refusing a change that breaks the store's rules
// (see [Store]).
func (s *Store) PutClaim(c *Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := checkClaim(s.state, c); err != nil {
		return err
	}
	if s.state.Claims == nil {
		s.state.Claims = map[string]*Claim{}
	}
	s.state.Claims[c.UID] = c.Clone()
	return nil
}

// DeleteClaim drops the record of claim uid.
func (s *Store) DeleteClaim(uid string) {
	s.mu.Lock()
	delete(s.state.Claims, uid)
	s.mu.Unlock()
}

// checkClaim checks the rules for c against the other records of st: a
// service belongs to one record, pod or claim; records naming one lease
// agree on its VNI.
func checkClaim(st *State, c *Claim) error {
	if c.UID == "" {
		return fmt.Errorf("%w: a claim record without a UID", ErrInvariant)
	}
	if err := checkHolderVNIs(st, c.VNI, c.Options, "claim "+c.Key()); err != nil {
		return err
	}
	for uid, o := range st.Claims {
		if uid == c.UID {
			continue
		}
		for _, a := range c.Services {
			if slices.ContainsFunc(o.Services, func(b ClaimService) bool { return a.NIC == b.NIC && a.ID == b.ID }) {
				return fmt.Errorf("%w: service %d on %s recorded for claims %s and %s", ErrInvariant, a.ID, a.NIC, o.Key(), c.Key())
			}
		}
		if c.LeaseKey != "" && o.LeaseKey == c.LeaseKey && o.VNI != c.VNI {
			return fmt.Errorf("%w: lease %s has VNI %d for claim %s and %d for claim %s", ErrInvariant, c.LeaseKey, o.VNI, o.Key(), c.VNI, c.Key())
		}
	}
	for key, p := range st.Pods {
		for _, a := range c.Services {
			if slices.ContainsFunc(p.Services, func(b Service) bool { return a.NIC == b.NIC && a.ID == b.ID }) {
				return fmt.Errorf("%w: service %d on %s recorded for pod %s and claim %s", ErrInvariant, a.ID, a.NIC, key, c.Key())
			}
		}
	}
	return nil
}
