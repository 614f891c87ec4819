package hooks

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Names in the project's API group.
const (
	APIVersion           = "slingshot.hpe.com/v1alpha1"
	KindVNI              = "VNI"
	AnnotationAssigned   = "slingshot.hpe.com/assigned-vni"
	AnnotationError      = "slingshot.hpe.com/vni-error"
	LabelOwnerUID        = "slingshot.hpe.com/owner-uid"
	maxRequestBytes      = 4 << 20
	retryLoadingSeconds  = 5
	resyncDrainSeconds   = 5
	resyncFullSeconds    = 30
	resyncCleanupSeconds = 1
)

// ErrBadRequest is wrapped by ParseRequest errors.
var ErrBadRequest = errors.New("bad hook request")

// OwnerReference is the part of an owner reference the hooks read.
type OwnerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Controller *bool  `json:"controller,omitempty"`
}

// ObjectMeta is the part of metadata the hooks read and write.
type ObjectMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	OwnerReferences   []OwnerReference  `json:"ownerReferences,omitempty"`
	DeletionTimestamp *string           `json:"deletionTimestamp,omitempty"`
}

// Object is a Kubernetes object as the hooks see it.
type Object struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   ObjectMeta      `json:"metadata"`
	Spec       json.RawMessage `json:"spec,omitempty"`
}

// Request is a DecoratorController hook request. Attachments are keyed by
// "<Kind>.<apiVersion>" and then by name (or namespace/name).
type Request struct {
	Controller  json.RawMessage               `json:"controller,omitempty"`
	Object      *Object                       `json:"object"`
	Attachments map[string]map[string]*Object `json:"attachments"`
	Finalizing  bool                          `json:"finalizing"`
}

// VNISpec is the spec of an attached VNI object.
type VNISpec struct {
	VNI      uint16   `json:"vni"`
	Scope    string   `json:"scope"`
	LeaseKey string   `json:"leaseKey"`
	Owner    OwnerRef `json:"owner"`
}

// OwnerRef names the lease's owner in a VNI's spec.
type OwnerRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
}

// VNIObject is an attachment the hooks return.
type VNIObject struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       VNISpec    `json:"spec"`
}

// Response is a DecoratorController hook response. A nil annotation value
// deletes the key; Status is always null (the parent's status is not ours).
type Response struct {
	Labels             map[string]*string `json:"labels"`
	Annotations        map[string]*string `json:"annotations"`
	Status             *json.RawMessage   `json:"status"`
	Attachments        []VNIObject        `json:"attachments"`
	ResyncAfterSeconds float64            `json:"resyncAfterSeconds,omitempty"`
	// Finalized is the finalize hook's answer. It is never omitted: a
	// false is an answer too ("not yet"), and Metacontroller's own
	// DecoratorHookResponse always carries it (no omitempty); /sync
	// answers carry false, which Metacontroller ignores there.
	Finalized bool `json:"finalized"`
}

// ParseRequest decodes and checks a hook request: it needs an object with
// apiVersion, kind, a namespace, a name and a UID (the VNI is namespaced
// and named after the UID). Errors wrap ErrBadRequest.
func ParseRequest(data []byte) (*Request, error) {
	var r Request
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	o := r.Object
	switch {
	case o == nil:
		return nil, fmt.Errorf("%w: no object", ErrBadRequest)
	case o.APIVersion == "" || o.Kind == "":
		return nil, fmt.Errorf("%w: object without apiVersion or kind", ErrBadRequest)
	case o.Metadata.Namespace == "":
		return nil, fmt.Errorf("%w: %s %s is not namespaced; VNIs belong to namespaced owners", ErrBadRequest, o.Kind, o.Metadata.Name)
	case o.Metadata.Name == "" || o.Metadata.UID == "":
		return nil, fmt.Errorf("%w: object without name or uid", ErrBadRequest)
	case len(o.Metadata.UID) > 128 || strings.ContainsAny(o.Metadata.UID, "/ "):
		return nil, fmt.Errorf("%w: malformed uid %q", ErrBadRequest, o.Metadata.UID)
	}
	if _, err := schema.ParseGroupVersion(o.APIVersion); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return &r, nil
}

// observedVNIs counts the VNI attachments Metacontroller observed.
func (r *Request) observedVNIs() int {
	n := 0
	for key, objs := range r.Attachments {
		if strings.HasPrefix(key, KindVNI+".") {
			n += len(objs)
		}
	}
	return n
}
