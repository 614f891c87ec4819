package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// recorder records how a test ended; Skipf and Fatalf end it (as testing
// does, through runtime.Goexit) by panicking with stop, recovered by ended.
type recorder struct {
	skipped, failed bool
	msg             string
}

type stop struct{}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	panic(stop{})
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	panic(stop{})
}

func (r *recorder) run(f func()) (returned bool) {
	defer func() {
		if v := recover(); v != nil && v != (stop{}) {
			panic(v)
		}
	}()
	f()
	return true
}

func TestRequirePrivileged(t *testing.T) {
	tests := []struct {
		name     string
		required bool
		wantSkip bool
	}{
		{"skips normally", false, true},
		{"fails where required", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{}
			if r.run(func() { requirePrivileged(r, "needs root", tt.required) }) {
				t.Fatal("RequirePrivileged returned: the test would go on without its privileges")
			}
			if r.skipped != tt.wantSkip || r.failed == tt.wantSkip {
				t.Fatalf("skipped %v, failed %v; want skipped %v", r.skipped, r.failed, tt.wantSkip)
			}
			if !strings.Contains(r.msg, "needs root") || !strings.Contains(r.msg, RequirePrivilegedEnv) {
				t.Fatalf("message %q: want the reason and the variable", r.msg)
			}
		})
	}
}

// The environment variable is what switches it.
func TestRequirePrivilegedReadsEnv(t *testing.T) {
	for _, v := range []string{"1", "", "0"} {
		t.Setenv(RequirePrivilegedEnv, v)
		r := &recorder{}
		r.run(func() { RequirePrivileged(r, "needs root") })
		if r.failed != (v == "1") {
			t.Errorf("%s=%q: failed %v, want %v", RequirePrivilegedEnv, v, r.failed, v == "1")
		}
	}
}
