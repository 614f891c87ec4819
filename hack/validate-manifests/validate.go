package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Validator checks Kubernetes objects: built-in kinds against the API's
// OpenAPI schemas and by strict decoding into their Go types, custom
// resources against their CRDs, and every object's metadata with the API
// machinery's own ObjectMeta validation.
type Validator struct {
	Builtin *BuiltinSchemas
	CRDs    *CRDs
	strict  runtime.Decoder
}

// NewValidator returns a validator over the given schemas.
func NewValidator(builtin *BuiltinSchemas, crds *CRDs) (*Validator, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return &Validator{Builtin: builtin, CRDs: crds, strict: serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()}, nil
}

// Object is one decoded manifest document.
type Object struct {
	GVK       schema.GroupVersionKind
	Name      string
	Namespace string
	JSON      []byte
	Map       map[string]any
}

func (o *Object) String() string {
	if o.Namespace != "" {
		return fmt.Sprintf("%s %s/%s", o.GVK.Kind, o.Namespace, o.Name)
	}
	return fmt.Sprintf("%s %s", o.GVK.Kind, o.Name)
}

// Decode parses one YAML document. Duplicate keys are errors, as in the
// API server's strict field validation. A document of only comments
// returns nil and no error.
func Decode(doc []byte) (*Object, error) {
	if len(bytes.TrimSpace(stripComments(doc))) == 0 {
		return nil, nil
	}
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	// The API machinery's decoder: whole numbers become int64, as the API
	// server sees them.
	var m map[string]any
	if err := utiljson.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("not an object: %w", err)
	}
	apiVersion, _ := m["apiVersion"].(string)
	kind, _ := m["kind"].(string)
	if apiVersion == "" || kind == "" {
		return nil, fmt.Errorf("object without apiVersion or kind")
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	o := &Object{GVK: gv.WithKind(kind), JSON: js, Map: m}
	if md, ok := m["metadata"].(map[string]any); ok {
		o.Name, _ = md["name"].(string)
		o.Namespace, _ = md["namespace"].(string)
	}
	return o, nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for line := range strings.Lines(string(doc)) {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(line)
		}
	}
	return b.Bytes()
}

// Validate returns every problem of o.
func (v *Validator) Validate(ctx context.Context, o *Object) []error {
	var errs []error
	var namespaced bool
	switch {
	case v.Builtin.Has(o.GVK):
		namespaced = v.Builtin.Namespaced(o.GVK)
		errs = append(errs, v.Builtin.Validate(o.GVK, o.Map)...)
		if _, _, err := v.strict.Decode(o.JSON, nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("strict decoding: %w", err))
		}
	case v.CRDs.Has(o.GVK):
		namespaced = v.CRDs.Namespaced(o.GVK)
		errs = append(errs, v.CRDs.Validate(ctx, o.GVK, o.Map)...)
	default:
		return []error{fmt.Errorf("%s is neither a Kubernetes %s kind nor served by a known CRD", o.GVK, kubeVersion)}
	}
	errs = append(errs, validateMeta(o, namespaced)...)
	return errs
}

// validateMeta decodes metadata strictly and runs the API machinery's
// ObjectMeta validation with the name rule of the kind. A namespaced
// object must name its namespace (the plain manifests are applied as they
// are), a cluster-scoped one must not.
func validateMeta(o *Object, namespaced bool) []error {
	raw, err := json.Marshal(o.Map["metadata"])
	if err != nil {
		return []error{err}
	}
	var meta metav1.ObjectMeta
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&meta); err != nil {
		return []error{fmt.Errorf("metadata: %w", err)}
	}
	var errs []error
	for _, e := range apivalidation.ValidateObjectMeta(&meta, namespaced, nameRule(o.GVK), field.NewPath("metadata")) {
		errs = append(errs, e)
	}
	if !namespaced && meta.Namespace != "" {
		errs = append(errs, fmt.Errorf("metadata.namespace: %s is cluster-scoped", o.GVK.Kind))
	}
	return errs
}

// nameRule returns the API server's name validation of a kind.
func nameRule(gvk schema.GroupVersionKind) apivalidation.ValidateNameFunc {
	switch {
	case gvk.Group == "" && gvk.Kind == "Namespace":
		return apivalidation.ValidateNamespaceName
	case gvk.Group == "" && gvk.Kind == "Service":
		return apivalidation.NameIsDNS1035Label
	case gvk.Group == "rbac.authorization.k8s.io":
		return func(name string, prefix bool) []string { return path.IsValidPathSegmentName(name) }
	default:
		return apivalidation.NameIsDNSSubdomain
	}
}
