// Package version says which build of the project a binary is: the
// release, the commit, the build date and the Go toolchain, for --version,
// slingshot_build_info and the agent's user agent towards the controller.
//
// The release is the Helm chart's appVersion: the Makefile reads it from
// deploy/helm/slingshot/Chart.yaml and sets Version with -ldflags -X, and
// the default below equals it (version_test.go checks), so that binaries
// of a plain `go build` or `go test` say the same.
package version

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Set at link time (-ldflags "-X <package>.Version=..."); variables, not
// constants, because -X only sets variables.
var (
	// Version is the release, semantic versioning without a "v".
	Version = "0.3.0-dev"
	// Commit is the source's git commit; empty: the one the go command
	// stamped into the binary (vcs.revision), if any.
	Commit = ""
	// BuildDate is when the binary was built, RFC 3339 in UTC; empty:
	// unknown (the go command records the commit's time, not the build's).
	BuildDate = ""
)

// Unknown stands for a value the binary does not know.
const Unknown = "unknown"

// Info is what one binary knows of its build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns this binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return info(Version, Commit, BuildDate, bi)
}

// info fills in what the link-time values leave empty: the commit from
// the go command's VCS stamp (with "-dirty" when the tree had changes),
// the rest as Unknown.
func info(version, commit, date string, bi *debug.BuildInfo) Info {
	if commit == "" && bi != nil {
		var rev string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" && modified {
			rev += "-dirty"
		}
		commit = rev
	}
	return Info{
		Version:   orUnknown(version),
		Commit:    orUnknown(commit),
		BuildDate: orUnknown(date),
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
}

func orUnknown(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return Unknown
	}
	return s
}

// String is the --version output of the program named program.
func (i Info) String(program string) string {
	return fmt.Sprintf("%s %s\ncommit:     %s\nbuild date: %s\ngo:         %s %s\n",
		program, i.Version, i.Commit, i.BuildDate, i.GoVersion, i.Platform)
}

// AgentProduct is the product token of the agent's gRPC user agent,
// "slingshot-agent/0.2.0" (gRPC appends its own, "grpc-go/1.x"): how the
// controller learns an agent's version without a field in the wire API,
// which changes only additively. An agent older than 0.2.0 sends none.
const AgentProduct = "slingshot-agent"

// UserAgent is the agent's gRPC user agent: AgentProduct/Version.
func UserAgent() string { return AgentProduct + "/" + orUnknown(Version) }

// ControllerHeader is the gRPC response header in which the controller
// names its release, on every answer to an agent (from 0.3.0): how an
// agent learns the controller's version without a field in the wire
// API, as the controller learns the agent's from its user agent. A
// controller before 0.3.0 sends none.
const ControllerHeader = "slingshot-controller-version"

// maxVersionLen bounds a version read from a peer: it is logged.
const maxVersionLen = 64

// FromPeer returns v, a version a peer sent (a header's value), and true
// when it can be one: not empty, short and printable. The value comes
// from the network and is logged and shown in errors.
func FromPeer(v string) (string, bool) {
	if v == "" || len(v) > maxVersionLen {
		return "", false
	}
	if strings.IndexFunc(v, func(r rune) bool { return r < '!' || r > '~' }) >= 0 {
		return "", false
	}
	return v, true
}

// FromUserAgent returns the version in a user agent's product token
// named product, and false when it has none. The value comes from the
// network: it is returned only when it is short and printable.
func FromUserAgent(ua, product string) (string, bool) {
	for tok := range strings.FieldsSeq(ua) {
		name, v, ok := strings.Cut(tok, "/")
		if !ok || name != product {
			continue
		}
		if v, ok := FromPeer(v); ok {
			return v, true
		}
	}
	return "", false
}

// Release is a parsed version, major.minor.patch with an optional
// pre-release and build suffix, which Skew ignores.
type Release struct{ Major, Minor, Patch int }

// ErrNotSemver is returned by Parse for what is not major.minor.patch.
var ErrNotSemver = errors.New("not a semantic version")

// Parse reads "0.2.0", "v0.2.0", "0.3.0-rc.1" or "0.2.0+abc".
func Parse(s string) (Release, error) {
	core := strings.TrimPrefix(s, "v")
	if i := strings.IndexAny(core, "-+"); i >= 0 {
		core = core[:i]
	}
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return Release{}, fmt.Errorf("version %q: %w", s, ErrNotSemver)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || (len(p) > 1 && p[0] == '0') {
			return Release{}, fmt.Errorf("version %q: %w", s, ErrNotSemver)
		}
		n[i] = v
	}
	return Release{Major: n[0], Minor: n[1], Patch: n[2]}, nil
}

// ErrSkew is returned by CheckSkew for an agent outside the skew policy.
var ErrSkew = errors.New("outside the version-skew policy")

// CheckSkew checks an agent's version against its controller's under
// the project's skew policy (docs/upgrade.md): a release is a
// major.minor (patches of one release interoperate), and the controller
// of release N serves agents of releases N-1 and N, so the controller is
// upgraded first and the agents after it. It returns an error wrapping
// ErrSkew for an agent outside that, or ErrNotSemver when either version
// cannot be read (then nothing is known of their skew).
func CheckSkew(controller, agent string) error {
	c, err := Parse(controller)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	a, err := Parse(agent)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	switch {
	case a.Major != c.Major:
		return fmt.Errorf("agent %s, controller %s: another major release: %w", agent, controller, ErrSkew)
	case a.Minor > c.Minor:
		return fmt.Errorf("agent %s is newer than controller %s (upgrade the controller first): %w", agent, controller, ErrSkew)
	case a.Minor < c.Minor-1:
		return fmt.Errorf("agent %s is more than one release older than controller %s: %w", agent, controller, ErrSkew)
	}
	return nil
}
