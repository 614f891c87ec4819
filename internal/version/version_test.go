package version

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/slingshot-k8s/slingshot/internal/version/versiontest"
)

// One source of truth: the chart's appVersion is the release. The default
// Version (what `go build` and `go test` binaries say), the chart's own
// version and the images' tag (values.yaml's image.tag, empty: the
// appVersion) all equal it; the Makefile sets Version from the same line.
func TestVersionIsTheChartsAppVersion(t *testing.T) {
	chart := versiontest.ReadChart(t, "../..")
	if chart.AppVersion != Version {
		t.Errorf("Chart.yaml appVersion %q, internal/version.Version %q: bump both together", chart.AppVersion, Version)
	}
	if chart.Version != chart.AppVersion {
		t.Errorf("Chart.yaml version %q differs from appVersion %q: the chart is released with the binaries", chart.Version, chart.AppVersion)
	}
	if _, err := Parse(Version); err != nil {
		t.Errorf("Version: %v", err)
	}
	var values struct {
		Image struct {
			Tag string `json:"tag"`
		} `json:"image"`
	}
	b, err := os.ReadFile(filepath.Join("../..", versiontest.ChartPath, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	if values.Image.Tag != "" {
		t.Errorf("values.yaml image.tag %q: leave it empty so the images follow appVersion", values.Image.Tag)
	}
}

func TestInfo(t *testing.T) {
	stamped := func(kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{}
		for i := 0; i+1 < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	tests := []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		want                  Info
	}{
		{name: "link-time values win over the VCS stamp", version: "0.2.0", commit: "abc", date: "2026-01-02T03:04:05Z",
			bi:   stamped("vcs.revision", "def", "vcs.modified", "true"),
			want: Info{Version: "0.2.0", Commit: "abc", BuildDate: "2026-01-02T03:04:05Z"}},
		{name: "commit from the VCS stamp", version: "0.2.0", bi: stamped("vcs.revision", "def", "vcs.modified", "false"),
			want: Info{Version: "0.2.0", Commit: "def", BuildDate: Unknown}},
		{name: "a changed tree is dirty", version: "0.2.0", bi: stamped("vcs.modified", "true", "vcs.revision", "def"),
			want: Info{Version: "0.2.0", Commit: "def-dirty", BuildDate: Unknown}},
		{name: "no build info (go test)", version: "0.2.0",
			want: Info{Version: "0.2.0", Commit: Unknown, BuildDate: Unknown}},
		{name: "no VCS stamp, blank values", version: " ", commit: "", date: "\t", bi: stamped("-trimpath", "true"),
			want: Info{Version: Unknown, Commit: Unknown, BuildDate: Unknown}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := info(tt.version, tt.commit, tt.date, tt.bi)
			tt.want.GoVersion, tt.want.Platform = runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH
			if got != tt.want {
				t.Errorf("info() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	s := Info{Version: "0.2.0", Commit: "abc", BuildDate: "2026-01-02T03:04:05Z", GoVersion: "go1.26.8", Platform: "linux/arm64"}.String("slingshot-agent")
	for _, want := range []string{"slingshot-agent 0.2.0\n", "commit:     abc\n", "build date: 2026-01-02T03:04:05Z\n", "go:         go1.26.8 linux/arm64\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, lacks %q", s, want)
		}
	}
}

func TestFromUserAgent(t *testing.T) {
	tests := []struct {
		ua     string
		want   string
		wantOK bool
	}{
		{ua: "slingshot-agent/0.2.0 grpc-go/1.80.0", want: "0.2.0", wantOK: true},
		{ua: "grpc-go/1.80.0 slingshot-agent/0.3.0-rc.1", want: "0.3.0-rc.1", wantOK: true},
		{ua: "grpc-go/1.80.0"}, // an agent before 0.2.0
		{ua: ""},
		{ua: "slingshot-agent/ grpc-go/1.80.0"},
		{ua: "slingshot-agentx/0.2.0"},
		{ua: "slingshot-agent"},
		{ua: "slingshot-agent/0.2.0\x00evil"},
		{ua: "slingshot-agent/0.2.0\u00e9"},
		{ua: "slingshot-agent/" + strings.Repeat("9", maxVersionLen+1)},
		{ua: "slingshot-agent/" + strings.Repeat("9", maxVersionLen), want: strings.Repeat("9", maxVersionLen), wantOK: true},
	}
	for _, tt := range tests {
		got, ok := FromUserAgent(tt.ua, AgentProduct)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("FromUserAgent(%q) = %q, %v; want %q, %v", tt.ua, got, ok, tt.want, tt.wantOK)
		}
	}
	if got, ok := FromUserAgent(UserAgent()+" grpc-go/1.80.0", AgentProduct); !ok || got != Version {
		t.Errorf("FromUserAgent(UserAgent()) = %q, %v; want %q", got, ok, Version)
	}
}

// A version a peer sends in a header is taken only when it is short and
// printable: it is logged and shown in errors.
func TestFromPeer(t *testing.T) {
	tests := []struct {
		in     string
		wantOK bool
	}{
		{in: "0.3.0", wantOK: true},
		{in: "0.4.0-rc.1+abc", wantOK: true},
		{in: ""},
		{in: "0.3.0 evil"},
		{in: "0.3.0\nlevel=ERROR"},
		{in: "0.3.0\u00e9"},
		{in: strings.Repeat("9", maxVersionLen+1)},
		{in: strings.Repeat("9", maxVersionLen), wantOK: true},
	}
	for _, tt := range tests {
		got, ok := FromPeer(tt.in)
		want := ""
		if tt.wantOK {
			want = tt.in
		}
		if got != want || ok != tt.wantOK {
			t.Errorf("FromPeer(%q) = %q, %v; want %q, %v", tt.in, got, ok, want, tt.wantOK)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Release
		err  bool
	}{
		{in: "0.2.0", want: Release{0, 2, 0}},
		{in: "v1.12.3", want: Release{1, 12, 3}},
		{in: "0.3.0-rc.1", want: Release{0, 3, 0}},
		{in: "0.2.1+abc", want: Release{0, 2, 1}},
		{in: "0.2", err: true},
		{in: "0.2.0.1", err: true},
		{in: "01.2.0", err: true},
		{in: "0.-2.0", err: true},
		{in: "a.b.c", err: true},
		{in: "", err: true},
		{in: Unknown, err: true},
		{in: "99999999999999999999.0.0", err: true},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.err {
			if !errors.Is(err, ErrNotSemver) {
				t.Errorf("Parse(%q) = %v, %v; want ErrNotSemver", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestCheckSkew(t *testing.T) {
	tests := []struct {
		controller, agent string
		want              error
	}{
		{controller: "0.3.0", agent: "0.3.0"},
		{controller: "0.3.2", agent: "0.3.0"},
		{controller: "0.3.0", agent: "0.3.1"}, // patches of one release interoperate
		{controller: "0.3.0", agent: "0.2.5"}, // N-1
		{controller: "0.3.0-rc.1", agent: "0.2.0"},
		{controller: "0.4.0", agent: "0.2.0", want: ErrSkew},
		{controller: "0.2.0", agent: "0.3.0", want: ErrSkew}, // agent ahead of its controller
		{controller: "1.0.0", agent: "0.9.0", want: ErrSkew},
		{controller: "0.3.0", agent: Unknown, want: ErrNotSemver},
		{controller: "dev", agent: "0.3.0", want: ErrNotSemver},
	}
	for _, tt := range tests {
		err := CheckSkew(tt.controller, tt.agent)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("CheckSkew(%q, %q) = %v, want %v", tt.controller, tt.agent, err, tt.want)
		}
	}
}
