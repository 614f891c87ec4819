// Package structure checks, from the type-checked code, the shape the
// design gives the agent (ARCHITECTURE.md): which package alone does what.
// A tool's silence proves nothing; these tests fail when a call or an
// import crosses a line.
package structure

import (
	"go/ast"
	"go/types"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

const module = "github.com/slingshot-k8s/slingshot"

// load type-checks the agent's packages (tests excluded: they may drive a
// driver directly to model a fault).
func load(t *testing.T) []*packages.Package {
	t.Helper()
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo | packages.NeedImports,
		Dir:  "../..",
	}
	pkgs, err := packages.Load(cfg, "./agent/...", "./cmd/slingshot-agent")
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
	})
	if len(errs) > 0 {
		t.Fatalf("loading the agent's packages: %s", strings.Join(errs, "\n"))
	}
	return pkgs
}

// serviceChanges are the calls that create, bind, enable or destroy a CXI
// service, by the type whose method they are: the service client, the
// engine's view of it, and the device beneath it (the driver's commands).
var serviceChanges = map[string][]string{
	module + "/cxi.Client":          {"Create", "CreateUnbound", "Bind", "Destroy"},
	module + "/agent/engine.Driver": {"Create", "CreateUnbound", "Bind", "Destroy"},
	module + "/agent/engine.Fabric": {"Create", "CreateUnbound", "Bind", "Destroy"},
	module + "/cxi.Device":          {"AllocService", "DestroyService", "EnableService", "SetNetns"},
	module + "/cxi/uapi.Device":     {"AllocService", "DestroyService", "EnableService", "SetNetns"},
}

// receiverName is "pkgpath.Type" of a method's receiver, pointer or not.
func receiverName(fn *types.Func) string {
	sig, ok := fn.Type().(*types.Signature)
	if !ok || sig.Recv() == nil {
		return ""
	}
	rt := sig.Recv().Type()
	if p, ok := rt.(*types.Pointer); ok {
		rt = p.Elem()
	}
	if n, ok := rt.(*types.Named); ok && n.Obj().Pkg() != nil {
		return n.Obj().Pkg().Path() + "." + n.Obj().Name()
	}
	return ""
}

// TestOnlyTheEngineChangesServices: outside agent/engine no code of the
// agent creates, binds or destroys a CXI service (issue 32). A method that
// forwards the same call to what it wraps (a counting decorator of the
// device, which only the service client calls) originates nothing.
func TestOnlyTheEngineChangesServices(t *testing.T) {
	var found []string
	seen := 0
	for _, p := range load(t) {
		if isTestSupport(p.PkgPath) {
			continue // imported by tests only (TestTestSupportOnlyInTests)
		}
		for _, f := range p.Syntax {
			ast.Inspect(f, func(n ast.Node) bool {
				decl, ok := n.(*ast.FuncDecl)
				if !ok {
					return true
				}
				ast.Inspect(decl, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					sel, ok := call.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					fn, ok := p.TypesInfo.Uses[sel.Sel].(*types.Func)
					if !ok {
						return true
					}
					names, ok := serviceChanges[receiverName(fn)]
					if !ok || !slices.Contains(names, fn.Name()) {
						return true
					}
					seen++
					if p.PkgPath == module+"/agent/engine" {
						return true
					}
					if decl.Recv != nil && decl.Name.Name == fn.Name() {
						return true // a decorator forwarding the call
					}
					found = append(found, p.Fset.Position(call.Pos()).String()+": "+receiverName(fn)+"."+fn.Name())
					return true
				})
				return false
			})
		}
	}
	if seen == 0 {
		t.Fatal("no call changing a service found at all: the check sees nothing")
	}
	if len(found) > 0 {
		t.Fatalf("CXI services changed outside agent/engine:\n%s", strings.Join(found, "\n"))
	}
}

// isTestSupport reports whether path is a package of helpers for tests
// (optionstest, controllertest, eventtest, ipamtest).
func isTestSupport(path string) bool { return strings.HasSuffix(path, "test") }

// TestTestSupportOnlyInTests: no package the agent runs imports a test
// helper package, which may drive the driver directly to model a fault.
func TestTestSupportOnlyInTests(t *testing.T) {
	for _, p := range load(t) {
		if isTestSupport(p.PkgPath) {
			continue
		}
		for path := range p.Imports {
			if strings.HasPrefix(path, module+"/") && isTestSupport(path) {
				t.Errorf("%s imports the test helpers %s", p.PkgPath, path)
			}
		}
	}
}

// TestFrontEndsStayApart: the agent's root wires the parts and serves
// HTTP; the device plugin's API is served by agent/devplugin alone and
// DRA's by agent/dra alone, and neither front end imports the other or
// the root.
func TestFrontEndsStayApart(t *testing.T) {
	imports := map[string][]string{}
	for _, p := range load(t) {
		for path := range p.Imports {
			imports[p.PkgPath] = append(imports[p.PkgPath], path)
		}
	}
	for _, tc := range []struct {
		pkg    string
		forbid []string
	}{
		{module + "/agent", []string{"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1", module + "/deviceplugin", module + "/gpu"}},
		{module + "/agent/devplugin", []string{module + "/agent", module + "/agent/dra", "k8s.io/dynamic-resource-allocation/kubeletplugin"}},
		{module + "/agent/dra", []string{module + "/agent", module + "/agent/devplugin", module + "/deviceplugin"}},
		{module + "/agent/nri", []string{module + "/agent", module + "/agent/devplugin", module + "/agent/dra", module + "/agent/engine"}},
	} {
		got, ok := imports[tc.pkg]
		if !ok {
			t.Fatalf("package %s not loaded", tc.pkg)
		}
		for _, f := range tc.forbid {
			if slices.Contains(got, f) {
				t.Errorf("%s imports %s", tc.pkg, f)
			}
		}
	}
}
