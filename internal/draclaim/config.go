// Package draclaim is what this driver's DRA claims say to it and what it
// says on them, read by the agent (which prepares the claims) and the
// controller (which leases their VNIs before their pods bind): the
// opaque configuration a claim passes (CXIClaimConfig) and the names of
// the binding conditions its devices carry.
package draclaim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// The opaque configuration a claim (or its DeviceClass) passes to this
// driver.
const (
	ConfigAPIVersion = "slingshot.hpe.com/v1alpha1"
	ConfigKind       = "CXIClaimConfig"
)

// ClaimConfig is a claim's configuration for this driver:
//
//	apiVersion: slingshot.hpe.com/v1alpha1
//	kind: CXIClaimConfig
//	vni: job            # job (default), pod, none or claim:NAME
//	envSuffix: STORAGE  # optional
//	serviceOptions:     # optional: the pod annotation slingshot.hpe.com/service-options'
//	  trafficClasses: [LOW_LATENCY, BULK_DATA]   # value, in the same grammar
//	  depth: 8                                   # (package internal/jobreq),
//	  resources: {TLEs: {res: 16}}               # checked against the agent's
//	  vnis: [storage]                            # jobOptions
type ClaimConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// VNI is whose VNI the claim's services carry, in the grammar of the
	// pod annotation slingshot.hpe.com/vni: "job" (the VNI of the pod's
	// job, found by walking its owners; the default), "pod", "none", or
	// "claim:NAME" (the VNI of the VNIClaim NAME, shared by every pod and
	// job that names it). The controller checks it.
	VNI string `json:"vni,omitempty"`
	// EnvSuffix, when set, names the claim's environment
	// SLINGSHOT_DEVICES_<SUFFIX> and so on instead of SLINGSHOT_DEVICES:
	// a pod holding two VNI domains sets it on one of its claims.
	EnvSuffix string `json:"envSuffix,omitempty"`
	// ServiceOptions is what the claim asks of its services, in the
	// grammar of the pod annotation slingshot.hpe.com/service-options;
	// nil asks nothing (the node's defaults).
	ServiceOptions *jobreq.Request `json:"serviceOptions,omitempty"`
}

var envSuffix = regexp.MustCompile(`^[A-Z0-9_]{1,32}$`)

// claimName is a Kubernetes object name (a DNS subdomain).
var claimName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// ParseConfig decodes and checks one opaque configuration. Unknown fields
// are refused, so that a misspelt field is an error rather than ignored.
func ParseConfig(raw []byte) (ClaimConfig, error) {
	var c ClaimConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return ClaimConfig{}, fmt.Errorf("%s: %w", ConfigKind, err)
	}
	if dec.More() {
		return ClaimConfig{}, fmt.Errorf("%s: trailing data after the object", ConfigKind)
	}
	if c.APIVersion != ConfigAPIVersion || c.Kind != ConfigKind {
		return ClaimConfig{}, fmt.Errorf("opaque config is %s %q, want %s %q", c.APIVersion, c.Kind, ConfigAPIVersion, ConfigKind)
	}
	if err := checkVNI(c.VNI); err != nil {
		return ClaimConfig{}, err
	}
	if c.ServiceOptions != nil {
		if err := c.ServiceOptions.Canonicalize(); err != nil {
			return ClaimConfig{}, fmt.Errorf("%s: serviceOptions: %w", ConfigKind, err)
		}
	}
	if c.EnvSuffix != "" && !envSuffix.MatchString(c.EnvSuffix) {
		return ClaimConfig{}, fmt.Errorf("%s: envSuffix %q: want 1 to 32 of A-Z, 0-9 and _", ConfigKind, c.EnvSuffix)
	}
	return c, nil
}

// checkVNI checks the grammar of ClaimConfig.VNI.
func checkVNI(v string) error {
	switch v {
	case "", "job", "pod", "none":
		return nil
	}
	name, ok := strings.CutPrefix(v, "claim:")
	if !ok || len(name) > 253 || !claimName.MatchString(name) {
		return fmt.Errorf("%s: vni %q: want job, pod, none or claim:NAME", ConfigKind, v)
	}
	return nil
}

// ConfigOf is the claim's configuration for driver: the opaque entries
// of its allocation, the DeviceClass's first and the claim's after, each
// later one overriding the fields it sets. An allocation with none gives
// the zero ClaimConfig (the job's VNI, plain names).
func ConfigOf(claim *resourceapi.ResourceClaim, driver string) (ClaimConfig, error) {
	var out ClaimConfig
	if claim.Status.Allocation == nil {
		return out, nil
	}
	entries := claim.Status.Allocation.Devices.Config
	for _, source := range []resourceapi.AllocationConfigSource{resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim} {
		for _, e := range entries {
			if e.Source != source || e.Opaque == nil || e.Opaque.Driver != driver {
				continue
			}
			c, err := ParseConfig(e.Opaque.Parameters.Raw)
			if err != nil {
				return ClaimConfig{}, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
			}
			if c.VNI != "" {
				out.VNI = c.VNI
			}
			if c.EnvSuffix != "" {
				out.EnvSuffix = c.EnvSuffix
			}
			if c.ServiceOptions != nil {
				var base jobreq.Request
				if out.ServiceOptions != nil {
					base = *out.ServiceOptions
				}
				merged := jobreq.Merge(base, *c.ServiceOptions)
				out.ServiceOptions = &merged
			}
		}
	}
	return out, nil
}

// ReservedPod is a pod a claim is reserved for.
type ReservedPod struct {
	Namespace, Name, UID string
}

// ReservedPods are the pods in the claim's status.reservedFor, in its
// order (a claim may also be reserved for other kinds of consumer, such
// as a PodGroup, which are not pods).
func ReservedPods(claim *resourceapi.ResourceClaim) []ReservedPod {
	var out []ReservedPod
	for _, ref := range claim.Status.ReservedFor {
		if ref.Resource == "pods" && ref.APIGroup == "" {
			out = append(out, ReservedPod{Namespace: claim.Namespace, Name: ref.Name, UID: string(ref.UID)})
		}
	}
	return out
}
