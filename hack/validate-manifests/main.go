// Command validate-manifests renders the slingshot Helm chart with Helm's
// own library and validates every object it makes, and every file of
// deploy/manifests, deploy/manifests/ha, deploy/crds and deploy/examples,
// the way the Kubernetes API server would on create with strict field
// validation:
//
//   - built-in kinds against the OpenAPI v3 schemas published with the
//     project's Kubernetes release (api/openapi-spec/v3 of the
//     k8s.io/kubernetes module, fetched through the Go module proxy), with
//     kube-openapi's validator and unknown fields rejected, and by strict
//     decoding into their Go types;
//   - CRDs with the API server's CRD validation, and custom resources
//     against their CRD's schema (kube-openapi validation, pruning for
//     unknown fields, CEL rules): the project's CRDs, Prometheus Operator's
//     ServiceMonitor and PrometheusRule CRDs and the Network Plumbing Working Group's
//     NetworkAttachmentDefinition CRD (Multus; both from their Go modules)
//     and a schema of Metacontroller's DecoratorController (schemas/);
//   - every object's metadata with the API machinery's ObjectMeta rules;
//   - the agent's configuration file in the ConfigMap with the agent's own
//     parser;
//   - what the examples ask of the high-speed network with the project's
//     parsers: slingshot-ipam's network configurations, and pods' requests
//     in slingshot.hpe.com/network or their Multus selections' cni-args
//     (CheckNetworks);
//   - DRA objects beyond their schemas: CEL selectors compiled in the API
//     server's DRA environment, claims' references to their own requests
//     and to pods' claims, and the examples' DeviceClasses and opaque
//     configs against the chart's DRA render (CheckDRA).
//
// It also checks that the generated files (the plain manifests, default
// and highly available, the chart's crds/, the copies in deploy/crds of the controller store's CRDs
// and the values table of the chart's README) equal a fresh render; with
// -write it regenerates them instead.
//
// Usage (from this directory): go run . [-root ../..] [-write]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	agentconfig "github.com/slingshot-k8s/slingshot/agent/config"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	ctx := context.Background()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "validate-manifests:", err)
		os.Exit(1)
	}
}

// upstreamCRDs are CRDs of other projects the chart makes objects of,
// read from their Go modules in the module cache.
var upstreamCRDs = []struct{ module, file string }{
	{"github.com/prometheus-operator/prometheus-operator@v0.85.0", "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"},
	{"github.com/prometheus-operator/prometheus-operator@v0.85.0", "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"},
	// The examples' Multus network of the slingshot-ipam CNI plugin.
	{"github.com/k8snetworkplumbingwg/network-attachment-definition-client@v1.7.7", "artifacts/networks-crd.yaml"},
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("validate-manifests", flag.ContinueOnError)
	root := fs.String("root", "../..", "the repository's root `directory`")
	write := fs.Bool("write", false, "regenerate the plain manifests, deploy/crds' copies of the store CRDs, the chart's crds/ and its README values table, then validate")
	print := fs.String("print", "", "print the chart rendered with the values of this `variant` (defaults, all-features, kube-ha, embedded-controller, sim-unprivileged, plaintext, dra) and exit")
	specDir := fs.String("openapi-dir", "", "`directory` of the Kubernetes OpenAPI v3 documents (default: api/openapi-spec/v3 of "+kubernetesModule+" in the Go module cache)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	start := time.Now()
	r := &report{out: stdout}

	ch, err := LoadChart(filepath.Join(*root, chartDir))
	if err != nil {
		return err
	}
	if *print != "" {
		variant, ok := VariantNamed(*print)
		if !ok {
			return fmt.Errorf("no variant %q", *print)
		}
		rendered, err := Render(ch, variant.Values, variant.APIVersions...)
		if err != nil {
			return err
		}
		for _, m := range rendered {
			fmt.Fprintf(stdout, "---\n# Source: %s\n%s\n", m.Source, m.Content)
		}
		return nil
	}
	gen, err := Generated(*root, ch)
	if err != nil {
		return err
	}
	if *write {
		if err := Write(*root, gen); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %d generated files\n", len(gen))
	} else {
		stale, err := Stale(*root, gen)
		if err != nil {
			return err
		}
		for _, s := range stale {
			if name, ok := strings.CutPrefix(s, crdDir+"/"); ok {
				r.fail("%s differs from its source %s/%s: edit the source, then run `make manifests`", s, storeCRDDir, name)
				continue
			}
			r.fail("generated file %s is stale: run `make manifests`", s)
		}
	}

	if *specDir == "" {
		if *specDir, err = openAPISpecDir(); err != nil {
			return err
		}
	}
	builtin, err := LoadBuiltinSchemas(*specDir)
	if err != nil {
		return err
	}
	v, err := NewValidator(builtin, NewCRDs())
	if err != nil {
		return err
	}

	// CRDs first: the project's, then the upstream ones and the schemas
	// written here.
	crdFiles, err := readDir(filepath.Join(*root, crdDir))
	if err != nil {
		return err
	}
	for _, f := range crdFiles {
		r.addCRDs(ctx, v, filepath.Join(crdDir, f.name), f.data)
	}
	for _, u := range upstreamCRDs {
		dir, err := moduleDir(u.module)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(filepath.Join(dir, u.file))
		if err != nil {
			return err
		}
		r.addCRDs(ctx, v, u.module+"/"+u.file, data)
	}
	own, err := readDir("schemas")
	if err != nil {
		return err
	}
	for _, f := range own {
		r.addCRDs(ctx, v, filepath.Join("schemas", f.name), f.data)
	}

	dra, err := ChartDRA(ch)
	if err != nil {
		return err
	}
	for _, variant := range Variants() {
		rendered, err := Render(ch, variant.Values, variant.APIVersions...)
		if err != nil {
			r.fail("render %s: %v", variant.Name, err)
			continue
		}
		var objs []*Object
		for _, m := range rendered {
			if o := r.object(ctx, v, "render "+variant.Name+": "+m.Source, []byte(m.Content)); o != nil {
				objs = append(objs, o)
			}
		}
		r.consistency("render "+variant.Name, objs, variant.External)
		for _, err := range CheckDRA(objs, dra) {
			r.fail("render %s: %v", variant.Name, err)
		}
	}
	for _, dir := range []string{manifestsDir, haManifestsDir, draManifestsDir, crdDir, examplesDir} {
		files, err := readDir(filepath.Join(*root, dir))
		if err != nil {
			return err
		}
		for _, f := range files {
			var objs []*Object
			for i, doc := range splitDocuments(f.data) {
				if o := r.object(ctx, v, fmt.Sprintf("%s/%s#%d", dir, f.name, i), doc); o != nil {
					objs = append(objs, o)
				}
			}
			if dir == manifestsDir || dir == haManifestsDir || dir == draManifestsDir {
				r.consistency(filepath.Join(dir, f.name), objs, nil)
			}
			for _, err := range CheckNetworks(objs) {
				r.fail("%s/%s: %v", dir, f.name, err)
			}
			for _, err := range CheckDRA(objs, dra) {
				r.fail("%s/%s: %v", dir, f.name, err)
			}
		}
	}

	fmt.Fprintf(stdout, "validated %d objects (%d CRDs, %d renders of the chart) in %s\n",
		r.objects, r.crds, len(Variants()), time.Since(start).Round(time.Millisecond))
	if r.failures > 0 {
		return fmt.Errorf("%d problems", r.failures)
	}
	return nil
}

// report counts what was checked and prints each problem.
type report struct {
	out      io.Writer
	objects  int
	crds     int
	failures int
}

func (r *report) fail(format string, args ...any) {
	r.failures++
	fmt.Fprintf(r.out, "FAIL "+format+"\n", args...)
}

func (r *report) addCRDs(ctx context.Context, v *Validator, source string, data []byte) {
	for i, doc := range splitDocuments(data) {
		o, err := Decode(doc)
		if err != nil {
			r.fail("%s#%d: %v", source, i, err)
			continue
		}
		if o == nil {
			continue
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
			r.fail("%s#%d: %v", source, i, err)
			continue
		}
		for _, err := range v.CRDs.Add(ctx, &crd) {
			r.fail("%s: CRD %s: %v", source, crd.Name, err)
		}
		r.crds++
	}
}

// object validates one document and returns it decoded (nil when it is
// empty or cannot be decoded).
func (r *report) object(ctx context.Context, v *Validator, source string, doc []byte) *Object {
	o, err := Decode(doc)
	if err != nil {
		r.fail("%s: %v", source, err)
		return nil
	}
	if o == nil {
		return nil
	}
	r.objects++
	for _, err := range v.Validate(ctx, o) {
		r.fail("%s: %s: %v", source, o, err)
	}
	for _, err := range checkAgentConfig(o) {
		r.fail("%s: %s: %v", source, o, err)
	}
	return o
}

func (r *report) consistency(source string, objs []*Object, external []string) {
	ext := map[string]bool{}
	for _, e := range external {
		ext[e] = true
	}
	for _, err := range Consistency(objs, ext) {
		r.fail("%s: %v", source, err)
	}
}

// checkAgentConfig parses the agent's configuration file carried by a
// ConfigMap with the agent's own strict parser.
func checkAgentConfig(o *Object) []error {
	if o.GVK.Kind != "ConfigMap" || !strings.HasSuffix(o.Name, "-agent") {
		return nil
	}
	data, _ := o.Map["data"].(map[string]any)
	cfg, ok := data["config.yaml"].(string)
	if !ok {
		return []error{errors.New("agent ConfigMap without config.yaml")}
	}
	if _, err := agentconfig.Parse([]byte(cfg)); err != nil {
		return []error{fmt.Errorf("agent config.yaml: %w", err)}
	}
	return nil
}

// splitDocuments splits a YAML stream at its "---" lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur strings.Builder
	for line := range strings.Lines(string(data)) {
		if strings.TrimRight(line, " \t\r\n") == "---" {
			docs = append(docs, []byte(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, []byte(cur.String()))
}
