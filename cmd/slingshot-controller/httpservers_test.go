package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 15, item 10: every HTTP server of the agent and the controller has
// read, header, write and idle timeouts. This reads the programs' source
// (not the tests', not hack/): each http.Server literal must set all four,
// and the package-level http.ListenAndServe and http.Serve, which make a
// server without any, must not be called.
func TestIssue15Item10EveryHTTPServerHasTimeouts(t *testing.T) {
	want := []string{"ReadHeaderTimeout", "ReadTimeout", "WriteTimeout", "IdleTimeout"}
	servers := 0
	for _, dir := range []string{"cmd", "agent", "controller", "controllerclient", "deviceplugin", "internal", "cxi", "gpu"} {
		root := filepath.Join("..", "..", dir)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					if !isSelector(n.Type, "http", "Server") {
						return true
					}
					servers++
					set := map[string]bool{}
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if id, ok := kv.Key.(*ast.Ident); ok {
								set[id.Name] = true
							}
						}
					}
					for _, w := range want {
						if !set[w] {
							t.Errorf("%s: an http.Server without %s", path, w)
						}
					}
				case *ast.CallExpr:
					for _, fn := range []string{"ListenAndServe", "ListenAndServeTLS", "Serve", "ServeTLS"} {
						if isSelector(n.Fun, "http", fn) {
							t.Errorf("%s: http.%s makes a server without timeouts", path, fn)
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if servers < 2 {
		t.Fatalf("found %d http.Server literals; the agent's and the controller's are missing from the walk", servers)
	}
}

func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}
