// Package testenv holds helpers for tests that need what only some
// machines give: root, namespaces, device nodes, the CNI plugins.
package testenv

import (
	"os"
	"testing"
)

// RequirePrivilegedEnv names the environment variable that, set to "1",
// turns [RequirePrivileged]'s skip into a failure. CI, which runs as root
// with everything installed, sets it, so that a CI that loses its
// privileges fails instead of passing without the tests that prove the
// invariants.
const RequirePrivilegedEnv = "SLINGSHOT_REQUIRE_PRIVILEGED"

// TB is the part of testing.TB that RequirePrivileged uses.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

var _ TB = testing.TB(nil)

// RequirePrivileged ends the test because this machine lacks what it
// needs, why saying what: skipped normally, failed where
// SLINGSHOT_REQUIRE_PRIVILEGED=1. Call it only for a test that could run
// here with the privileges; like Skip, it does not return.
func RequirePrivileged(t TB, why string) {
	t.Helper()
	requirePrivileged(t, why, os.Getenv(RequirePrivilegedEnv) == "1")
}

func requirePrivileged(t TB, why string, required bool) {
	t.Helper()
	if required {
		t.Fatalf("%s, and %s=1: this test must run here", why, RequirePrivilegedEnv)
	}
	t.Skipf("%s (set %s=1 to fail instead)", why, RequirePrivilegedEnv)
}
