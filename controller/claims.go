package controller

import (
	"errors"
	"fmt"

	"github.com/slingshot-k8s/slingshot/controller/store"
)

// ClaimRef names a VNIClaim.
type ClaimRef struct {
	Namespace, Name string
}

// ClaimObserver hears of the leases of VNIClaims, so that the claims'
// status can show their VNI (package claimstatus implements it). The
// Allocator calls Leased and Failed after each acquire naming a claim, so
// they must cost no more than a map look-up when nothing changed: an
// acquire is made by every node of a job. Forget and Loaded are called
// with the Allocator's lock held: they must not call the Allocator back.
type ClaimObserver interface {
	// Leased says the claim's lease, committed, holds vni.
	Leased(c ClaimRef, vni uint16)
	// Failed says the claim could not get a VNI, why in a short message.
	Failed(c ClaimRef, message string)
	// Forget says the claim's lease is freed (the claim is being deleted).
	Forget(c ClaimRef)
	// Loaded says the state was (re)loaded, at start, after a takeover
	// or after a failed commit; claims are those holding a lease now.
	Loaded(claims []ClaimRef)
}

// ClaimVNI returns the VNI of the claim's committed lease; leased is false
// when it has none. It returns an error wrapping ErrUnavailable before the
// state is loaded, or while the lease's first commit is under way (the
// acquire that made it tells the observer once it is committed).
func (s *Allocator) ClaimVNI(c ClaimRef) (vni uint16, leased bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.gate(); err != nil {
		return 0, false, err
	}
	l := s.leases[LeaseKey(store.ScopeClaim, store.Owner{Namespace: c.Namespace, Name: c.Name})]
	if l == nil {
		return 0, false, nil
	}
	if l.made != nil && !l.made.committed() {
		return 0, false, fmt.Errorf("%w: the lease of claim %s/%s is being committed", ErrUnavailable, c.Namespace, c.Name)
	}
	return l.rec.VNI, true, nil
}

// claimRef returns the claim a lease of ScopeClaim belongs to.
func claimRef(o store.Owner) ClaimRef { return ClaimRef{Namespace: o.Namespace, Name: o.Name} }

// claimFailure is the short message a claim's status shows for an
// acquire's error, "" for an error that is not the claim's to show
// (a look-up that failed, a claim being deleted).
func claimFailure(err error) string {
	ex, ok := errors.AsType[*ExhaustedError](err)
	if !ok {
		return ""
	}
	if ex.Resource == "namespace" {
		return fmt.Sprintf("no VNI: namespace %s holds %d VNI leases, its cap (--max-leases-per-namespace)", ex.Range, ex.Capacity)
	}
	return fmt.Sprintf("no VNI: the range %s (%d VNIs) is full", ex.Range, ex.Capacity)
}

// tellClaimsLoadedLocked tells the observer the claims that hold leases
// after a load; call with s.mu held, as the gate opens, so that the
// observer hears of the load before any acquire is answered.
func (s *Allocator) tellClaimsLoadedLocked() {
	if s.cfg.Claims == nil {
		return
	}
	var claims []ClaimRef
	for _, l := range s.leases {
		if l.rec.Scope == store.ScopeClaim {
			claims = append(claims, claimRef(l.rec.Owner))
		}
	}
	s.cfg.Claims.Loaded(claims)
}
