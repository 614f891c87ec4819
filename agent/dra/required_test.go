package dra

import (
	"strings"
	"testing"
)

// TestNewManagerRefusesMissingRequiredFields: a Manager without the
// engine or a say on whether a claim can be bound is
// refused at construction. BindReady above all: without it Prepare used to
// take "always ready", so a claim was prepared while no NRI connection
// could bind it and its container started on a service admitting nobody
// (issue 32, fail-open defaults).
func TestNewManagerRefusesMissingRequiredFields(t *testing.T) {
	for _, tc := range []struct {
		field string
		clear func(*ManagerConfig)
	}{
		{"Engine", func(c *ManagerConfig) { c.Engine = nil }},
		{"BindReady", func(c *ManagerConfig) { c.BindReady = nil }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			r := newRig(t)
			cfg := r.cfg
			tc.clear(&cfg)
			_, err := NewManager(cfg)
			if err == nil || !strings.Contains(err.Error(), "ManagerConfig."+tc.field+" is required") {
				t.Fatalf("NewManager without %s: error %v, want one naming it", tc.field, err)
			}
		})
	}
}
