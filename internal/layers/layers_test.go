package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/slingshot-k8s/slingshot"

// deps returns the packages pkg depends on, itself included.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// The lower layers never import the agent or the controller.
func TestLowerLayersImportNoUpperOne(t *testing.T) {
	for _, pkg := range []string{"./cxi/...", "./gpu/...", "./deviceplugin/...", "./internal/pcisysfs/...", "./internal/mocksysfs/..."} {
		for _, d := range deps(t, module+"/"+strings.TrimPrefix(pkg, "./")) {
			if strings.HasPrefix(d, module+"/agent") || strings.HasPrefix(d, module+"/controller") {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}

// The agent links the controller's wire API and leaf value packages only:
// no controller logic, no store, no database.
func TestAgentLinksNoControllerNorDatabase(t *testing.T) {
	allowed := map[string]bool{
		module + "/controller/api/v1":         true, // the generated wire API
		module + "/controller/vnialloc":       true, // VNI ranges
		module + "/controller/slices":         true, // node slices
		module + "/controller/internal/idset": true, // under vnialloc and slices
		module + "/controller/store":          true, // the records' types, under slices; no backend
	}
	for _, pkg := range []string{module + "/agent", module + "/controllerclient", module + "/cmd/slingshot-agent"} {
		for _, d := range deps(t, pkg) {
			if strings.Contains(d, "sqlite") || strings.HasPrefix(d, module+"/controller/") && !allowed[d] || d == module+"/controller" {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}
