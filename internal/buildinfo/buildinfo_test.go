package buildinfo

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slingshot-k8s/slingshot/internal/version"
)

func TestCollector(t *testing.T) {
	tests := []struct {
		name string
		info version.Info
		want string
	}{
		{name: "release build", info: version.Info{Version: "0.2.0", Commit: "abc", BuildDate: "2026-01-02T03:04:05Z", GoVersion: "go1.26.8"},
			want: `slingshot_build_info{build_date="2026-01-02T03:04:05Z",commit="abc",go_version="go1.26.8",version="0.2.0"} 1`},
		// Label values come from -ldflags: anything is escaped, nothing panics.
		{name: "odd values", info: version.Info{Version: "0.2.0", Commit: "a\"b\\c\nd", BuildDate: version.Unknown, GoVersion: "go1.26.8"},
			want: `slingshot_build_info{build_date="unknown",commit="a\"b\\c\nd",go_version="go1.26.8",version="0.2.0"} 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(NewCollector(tt.info)); err != nil {
				t.Fatal(err)
			}
			exp := "# HELP slingshot_build_info The binary's build: its release, git commit, build date and Go version; always 1.\n" +
				"# TYPE slingshot_build_info gauge\n" + tt.want + "\n"
			if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), Name); err != nil {
				t.Error(err)
			}
		})
	}
}
