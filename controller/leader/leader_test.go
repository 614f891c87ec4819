package leader

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestValidate(t *testing.T) {
	ok := Config{Namespace: "slingshot", Name: "slingshot-controller", Identity: "pod-0"}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"defaults", ok, ""},
		{"no lease name", Config{Namespace: "slingshot", Identity: "p"}, "namespace and name"},
		{"no identity", Config{Namespace: "slingshot", Name: "x"}, "identity"},
		{"renew not below lease", func() Config { c := ok; c.LeaseDuration, c.RenewDeadline = 5*time.Second, 5*time.Second; return c }(), "renew deadline"},
		{"retry not below renew", func() Config { c := ok; c.RetryPeriod = 6 * time.Second; return c }(), "retry period"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestNewRegistersMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e, err := New(nil, Config{Namespace: "ns", Name: "l", Identity: "a", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(e.m.leader); got != 0 {
		t.Fatalf("leader gauge %v before any election", got)
	}
	if n, err := testutil.GatherAndCount(reg, "slingshot_controller_leader", "slingshot_controller_leader_terms_total"); err != nil || n != 2 {
		t.Fatalf("registered metrics: %d, %v", n, err)
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Fatal("New accepted an empty config")
	}
}
