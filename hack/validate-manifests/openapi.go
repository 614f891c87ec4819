package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	crvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
)

// kubernetesModule is the Kubernetes release whose published OpenAPI v3
// documents (api/openapi-spec/v3 in the module) the manifests are checked
// against: the release the project builds against.
const kubernetesModule = "k8s.io/kubernetes@v1.37.1"

// openAPISpecDir returns the directory of the OpenAPI v3 documents of
// kubernetesModule.
func openAPISpecDir() (string, error) {
	dir, err := moduleDir(kubernetesModule)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "api", "openapi-spec", "v3"), nil
}

// moduleDir returns the directory of module@version in the module cache,
// downloading it through the Go module proxy when it is not there yet.
func moduleDir(module string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", module, mod.Error)
	}
	return mod.Dir, nil
}

// BuiltinSchemas holds the Kubernetes API's OpenAPI v3 component schemas
// and which kinds they describe.
type BuiltinSchemas struct {
	schemas    map[string]*spec.Schema
	byGVK      map[schema.GroupVersionKind]string
	namespaced map[schema.GroupVersionKind]bool
}

// openAPIDocument is the part of an OpenAPI v3 document read here.
type openAPIDocument struct {
	Components struct {
		Schemas map[string]*spec.Schema `json:"schemas"`
	} `json:"components"`
	Paths map[string]map[string]json.RawMessage `json:"paths"`
}

type gvkExtension struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// LoadBuiltinSchemas reads every *_openapi.json document of dir. A kind is
// namespaced when one of its create paths names a namespace.
func LoadBuiltinSchemas(dir string) (*BuiltinSchemas, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_openapi.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no OpenAPI v3 documents in %s", dir)
	}
	b := &BuiltinSchemas{schemas: map[string]*spec.Schema{}, byGVK: map[schema.GroupVersionKind]string{}, namespaced: map[schema.GroupVersionKind]bool{}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var doc openAPIDocument
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for name, s := range doc.Components.Schemas {
			b.schemas[name] = s
			var gvks []gvkExtension
			if raw, ok := s.Extensions["x-kubernetes-group-version-kind"]; ok {
				if err := remarshal(raw, &gvks); err != nil {
					return nil, fmt.Errorf("%s: %s: %w", f, name, err)
				}
			}
			for _, g := range gvks {
				gvk := schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
				// Only a kind's own schema has apiVersion, kind and
				// metadata; option types such as DeleteOptions list many
				// GVKs and are never objects of a manifest.
				if _, ok := s.Properties["metadata"]; ok {
					b.byGVK[gvk] = name
				}
			}
		}
		for path, ops := range doc.Paths {
			post, ok := ops["post"]
			if !ok || !strings.Contains(path, "{namespace}") {
				continue
			}
			var op struct {
				GVK *gvkExtension `json:"x-kubernetes-group-version-kind"`
			}
			if err := json.Unmarshal(post, &op); err != nil || op.GVK == nil {
				continue
			}
			b.namespaced[schema.GroupVersionKind{Group: op.GVK.Group, Version: op.GVK.Version, Kind: op.GVK.Kind}] = true
		}
	}
	return b, nil
}

func remarshal(in, out any) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// Has reports whether gvk is a built-in kind.
func (b *BuiltinSchemas) Has(gvk schema.GroupVersionKind) bool {
	_, ok := b.byGVK[gvk]
	return ok
}

// Namespaced reports whether the built-in kind gvk is namespaced.
func (b *BuiltinSchemas) Namespaced(gvk schema.GroupVersionKind) bool { return b.namespaced[gvk] }

// Validate checks obj, a decoded JSON object of kind gvk, against its
// OpenAPI schema with kube-openapi's validator, the one the API server
// uses for custom resources. Unlike the published schemas, which leave
// additional properties open, it rejects every field a schema does not
// declare, as the API server's strict field validation does.
func (b *BuiltinSchemas) Validate(gvk schema.GroupVersionKind, obj map[string]any) (errs []error) {
	name, ok := b.byGVK[gvk]
	if !ok {
		return []error{fmt.Errorf("%s is not a kind of the Kubernetes API", gvk)}
	}
	defer func() {
		// The validator panics on schema constructs it does not support;
		// report that rather than crash.
		if r := recover(); r != nil {
			errs = append(errs, fmt.Errorf("validator failed on schema %s: %v", name, r))
		}
	}()
	root, err := b.prepare(&spec.Schema{SchemaProps: spec.SchemaProps{Ref: spec.MustCreateRef("#/components/schemas/" + name)}})
	if err != nil {
		return []error{err}
	}
	res := validate.NewSchemaValidator(root, nil, "", strfmt.Default, b.resolveChildren()).Validate(obj)
	for _, e := range res.Errors {
		errs = append(errs, e)
	}
	sortErrors(errs)
	return errs
}

// resolveChildren makes the validator resolve references of the schemas of
// properties, map values and list items as it reaches them; the recursive
// kinds (JSONSchemaProps) rule out resolving every reference up front.
func (b *BuiltinSchemas) resolveChildren() validate.Option {
	var opt validate.Option
	child := func(s *spec.Schema, root any, path string, formats strfmt.Registry) validate.ValueValidator {
		p, err := b.prepare(s)
		if err != nil {
			return failing{path: path, err: err}
		}
		return validate.NewSchemaValidator(p, root, path, formats, opt)
	}
	opt = func(o *validate.SchemaValidatorOptions) {
		o.NewValidatorForField = func(_ string, s *spec.Schema, root any, path string, formats strfmt.Registry, _ ...validate.Option) validate.ValueValidator {
			return child(s, root, path, formats)
		}
		o.NewValidatorForIndex = func(_ int, s *spec.Schema, root any, path string, formats strfmt.Registry, _ ...validate.Option) validate.ValueValidator {
			return child(s, root, path, formats)
		}
	}
	return opt
}

// maxRefChain bounds reference chains (a $ref to a schema that is itself
// only a $ref, ...).
const maxRefChain = 16

// prepare returns a copy of s with its own reference resolved (a $ref, or
// the published form {allOf: [{$ref}], default, description}) and with
// additional properties closed where the schema lists properties and does
// not preserve unknown fields.
func (b *BuiltinSchemas) prepare(s *spec.Schema) (*spec.Schema, error) {
	cur := *s
	for range maxRefChain {
		ref := cur.Ref.String()
		if ref == "" && len(cur.AllOf) == 1 && cur.AllOf[0].Ref.String() != "" && len(cur.Properties) == 0 && len(cur.Type) == 0 {
			ref = cur.AllOf[0].Ref.String()
		}
		if ref == "" {
			break
		}
		name, ok := strings.CutPrefix(ref, "#/components/schemas/")
		target := b.schemas[name]
		if !ok || target == nil {
			return nil, fmt.Errorf("unresolvable schema reference %q", ref)
		}
		cur = *target
	}
	if cur.Ref.String() != "" {
		return nil, fmt.Errorf("schema reference chain longer than %d", maxRefChain)
	}
	for _, sub := range [][]spec.Schema{cur.AllOf, cur.AnyOf, cur.OneOf} {
		for _, x := range sub {
			if x.Ref.String() != "" {
				return nil, fmt.Errorf("unsupported reference %q inside allOf/anyOf/oneOf", x.Ref.String())
			}
		}
	}
	// Formats the API server does not validate (int-or-string, ...) are
	// markers for clients; the validator would take them for type rules.
	if err := stripFormats(&cur); err != nil {
		return nil, err
	}
	preserve, _ := cur.Extensions.GetBool("x-kubernetes-preserve-unknown-fields")
	if len(cur.Properties) > 0 && cur.AdditionalProperties == nil && !preserve {
		cur.AdditionalProperties = &spec.SchemaOrBool{Allows: false}
	}
	return &cur, nil
}

// stripFormats drops the formats the API server leaves unchecked, as it
// does for CRD schemas.
var stripFormats = crvalidation.StripUnsupportedFormatsPostProcessorForVersion(environment.DefaultCompatibilityVersion())

// failing is a validator that reports one error.
type failing struct {
	path string
	err  error
}

func (f failing) SetPath(string)               {}
func (failing) Applies(any, reflect.Kind) bool { return true }
func (f failing) Validate(any) *validate.Result {
	r := &validate.Result{}
	r.AddErrors(fmt.Errorf("%s: %w", f.path, f.err))
	return r
}

func sortErrors(errs []error) {
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
}
