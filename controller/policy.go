package controller

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/slingshot-k8s/slingshot/internal/draclaim"
)

// AnnotationVNI chooses a pod's VNI scope; see the package documentation.
const AnnotationVNI = "slingshot.hpe.com/vni"

// AnnotationNetwork is a pod's network request (the HSN IP pool, netdev,
// subnet or address it wants), passed to the node unparsed; see the
// package documentation.
const AnnotationNetwork = "slingshot.hpe.com/network"

// Mode is the VNI scope a pod or owner asks for.
type Mode string

// Modes of AnnotationVNI.
const (
	ModeJob   Mode = "job"
	ModeNone  Mode = "none"
	ModePod   Mode = "pod"
	ModeClaim Mode = "claim"
	// ModeResourceClaim is the VNI of a PodGroup's DRA ResourceClaim
	// (draclaim.GroupPolicy): a job-scoped lease owned by the claim. Only
	// a node's request names it, never a pod's annotation.
	ModeResourceClaim Mode = "resourceclaim"
)

// Policy is a parsed AnnotationVNI value.
type Policy struct {
	Mode Mode
	// Claim is the VNIClaim's name for ModeClaim, the ResourceClaim's for
	// ModeResourceClaim.
	Claim string
	// ClaimUID is the ResourceClaim's UID for ModeResourceClaim.
	ClaimUID string
}

var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func validSubdomain(s string) bool { return len(s) <= 253 && dnsSubdomain.MatchString(s) }

// ParsePolicy parses an AnnotationVNI value: "" or "job" (also "true"),
// "none" (also "false"), "pod", or "claim:NAME". It returns a *FieldError
// for anything else.
func ParsePolicy(v string) (Policy, error) { return parsePolicy(v, "annotation "+AnnotationVNI) }

// parseRequestPolicy is the policy a node's request names: parsePolicy's,
// or a PodGroup claim's (draclaim.GroupPolicy).
func parseRequestPolicy(v string) (Policy, error) {
	name, uid, ok, err := draclaim.ParseGroupPolicy(v)
	switch {
	case err != nil:
		return Policy{}, &FieldError{Field: "policy", Reason: err.Error()}
	case ok:
		return Policy{Mode: ModeResourceClaim, Claim: name, ClaimUID: uid}, nil
	}
	return parsePolicy(v, "policy")
}

// parsePolicy is ParsePolicy for a value read from field, which its
// *FieldError names: the annotation, or a request's own policy.
func parsePolicy(v, field string) (Policy, error) {
	switch s := strings.TrimSpace(v); s {
	case "", "job", "true":
		return Policy{Mode: ModeJob}, nil
	case "none", "false":
		return Policy{Mode: ModeNone}, nil
	case "pod":
		return Policy{Mode: ModePod}, nil
	default:
		name, ok := strings.CutPrefix(s, "claim:")
		if !ok || !validSubdomain(name) {
			return Policy{}, &FieldError{Field: field,
				Reason: fmt.Sprintf("%q: want none, job, pod or claim:NAME", v)}
		}
		return Policy{Mode: ModeClaim, Claim: name}, nil
	}
}
