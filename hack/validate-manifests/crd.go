package main

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	crvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// CRDs holds custom resource definitions and validates custom resources
// the way the API server does: the CRD's structural schema with
// kube-openapi's validator, unknown fields found by pruning, and the
// schema's CEL rules.
type CRDs struct {
	scheme   *runtime.Scheme
	versions map[schema.GroupVersionKind]*crdVersion
}

type crdVersion struct {
	crd        string
	namespaced bool
	structural *structuralschema.Structural
	validator  crvalidation.SchemaValidator
	cel        *cel.Validator
}

// NewCRDs returns an empty set.
func NewCRDs() *CRDs {
	s := runtime.NewScheme()
	apiextensionsinstall.Install(s)
	return &CRDs{scheme: s, versions: map[schema.GroupVersionKind]*crdVersion{}}
}

// Add validates crd with the API server's own CRD validation and, when it
// is valid, learns its served versions.
func (c *CRDs) Add(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) []error {
	c.scheme.Default(crd)
	var internal apiextensions.CustomResourceDefinition
	if err := c.scheme.Convert(crd, &internal, nil); err != nil {
		return []error{fmt.Errorf("convert CRD %s: %w", crd.Name, err)}
	}
	var errs []error
	for _, e := range crdvalidation.ValidateCustomResourceDefinition(ctx, &internal) {
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return errs
	}
	for _, v := range internal.Spec.Versions {
		props := internal.Spec.Validation
		if v.Schema != nil {
			props = v.Schema
		}
		if props == nil || props.OpenAPIV3Schema == nil {
			errs = append(errs, fmt.Errorf("CRD %s version %s has no schema", crd.Name, v.Name))
			continue
		}
		ss, err := structuralschema.NewStructural(props.OpenAPIV3Schema)
		if err != nil {
			errs = append(errs, fmt.Errorf("CRD %s version %s: %w", crd.Name, v.Name, err))
			continue
		}
		validator, _, err := crvalidation.NewSchemaValidator(props.OpenAPIV3Schema)
		if err != nil {
			errs = append(errs, fmt.Errorf("CRD %s version %s: %w", crd.Name, v.Name, err))
			continue
		}
		gvk := schema.GroupVersionKind{Group: internal.Spec.Group, Version: v.Name, Kind: internal.Spec.Names.Kind}
		c.versions[gvk] = &crdVersion{
			crd:        crd.Name,
			namespaced: internal.Spec.Scope == apiextensions.NamespaceScoped,
			structural: ss,
			validator:  validator,
			cel:        cel.NewValidator(ss, true, celconfig.PerCallLimit),
		}
	}
	return errs
}

// Has reports whether gvk is a kind of a known CRD.
func (c *CRDs) Has(gvk schema.GroupVersionKind) bool { return c.versions[gvk] != nil }

// Namespaced reports whether gvk's CRD is namespaced.
func (c *CRDs) Namespaced(gvk schema.GroupVersionKind) bool {
	v := c.versions[gvk]
	return v != nil && v.namespaced
}

// Validate checks obj, a custom resource of kind gvk, as the API server
// would on create with strict field validation.
func (c *CRDs) Validate(ctx context.Context, gvk schema.GroupVersionKind, obj map[string]any) []error {
	v := c.versions[gvk]
	if v == nil {
		return []error{fmt.Errorf("%s is served by no known CRD", gvk)}
	}
	var errs []error
	for _, e := range crvalidation.ValidateCustomResource(nil, obj, v.validator) {
		errs = append(errs, e)
	}
	pruned := runtime.DeepCopyJSON(obj)
	unknown := pruning.PruneWithOptions(pruned, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	sort.Strings(unknown)
	for _, p := range unknown {
		errs = append(errs, fmt.Errorf("unknown field %q (not in the schema of CRD %s)", p, v.crd))
	}
	if v.cel != nil {
		celErrs, _ := v.cel.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		for _, e := range celErrs {
			errs = append(errs, e)
		}
	}
	return errs
}
