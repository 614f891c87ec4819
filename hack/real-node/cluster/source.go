package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/slingshot-k8s/slingshot/hack/real-node/images"
)

// Source is one build of the project that the node can run: its Helm
// chart, and its agent and controller images, imported into the node's
// containerd under Tag. HEAD's is the working tree's (Env.Head); a
// baseline's is built from a commit of the repository's history
// (Options.Baseline, Env.Baseline), so that a test can move a release
// between the two as a site's `helm upgrade` and `helm rollback` do.
type Source struct {
	// Name says which it is in messages: "HEAD", "baseline 0.2.0 (fbf5f66)".
	Name string
	// ChartDir is its chart, whose crds/ are its CRDs.
	ChartDir string
	// Tag is its images' tag (the chart's image.tag).
	Tag string
	// Version and Commit are what its agent binary says of itself
	// (--version), and what its agent and controller export as
	// slingshot_build_info's version and commit labels.
	Version, Commit string
	// bin holds its static binaries.
	bin string
}

// AgentImage and ControllerImage are its images as the chart names them.
func (s *Source) AgentImage() string { return Registry + "/slingshot-agent:" + s.Tag }

// ControllerImage: see AgentImage.
func (s *Source) ControllerImage() string { return Registry + "/slingshot-controller:" + s.Tag }

// String is s.Name.
func (s *Source) String() string { return s.Name }

// The project's programs the images are made of (importImages).
var projectCommands = []string{"./cmd/slingshot-agent", "./cmd/slingshot-controller", "./cmd/slingshot-ipam", "./cmd/kubectl-slingshot"}

// versionPkg is the package whose variables -X stamps, as the Makefile's
// release builds do.
const versionPkg = "github.com/slingshot-k8s/slingshot/internal/version"

// baselineDir is where Build puts the baseline under the node's root:
// bin/ and chart/.
const baselineDir = "baseline"

// BuildBaseline builds the project as it was at commit, from the
// repository at repoDir: a git worktree of the commit in a temporary
// directory under out (removed again, with its entry in the repository),
// whose programs are built into out/bin (stamped with the commit, as a
// release build is) and whose chart is copied to out/chart. It fails,
// saying why, when git is missing or the repository has no such commit
// (a shallow clone): a baseline that cannot be built is a failed test,
// never a skipped one.
func BuildBaseline(ctx context.Context, repoDir, commit, out string) error {
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("baseline %s: git is needed to build it from the repository's history: %w", commit, err)
	}
	full, err := git(ctx, repoDir, "rev-parse", "--verify", "--quiet", commit+"^{commit}")
	if err != nil {
		return fmt.Errorf("baseline: commit %s is not in the repository at %s (a shallow clone? `git fetch --unshallow`): %w", commit, repoDir, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	src, err := os.MkdirTemp(out, "src-")
	if err != nil {
		return err
	}
	if _, err := git(ctx, repoDir, "worktree", "add", "--detach", src, full); err != nil {
		os.RemoveAll(src)
		return fmt.Errorf("baseline %s: %w", commit, err)
	}
	berr := buildSource(ctx, src, full, out)
	// The worktree's directory and its entry under the repository's
	// .git/worktrees go, whatever the build did.
	_, rerr := git(context.WithoutCancel(ctx), repoDir, "worktree", "remove", "--force", src)
	if rerr != nil {
		rerr = fmt.Errorf("baseline: remove its worktree: %w", rerr)
	}
	return errors.Join(berr, rerr)
}

// buildSource builds the programs of the checkout src of commit into
// out/bin and copies its chart to out/chart.
func buildSource(ctx context.Context, src, commit, out string) error {
	if err := images.BuildStaticLD(ctx, src, filepath.Join(out, "bin"), "-X "+versionPkg+".Commit="+commit, projectCommands...); err != nil {
		return fmt.Errorf("baseline %s: %w", commit, err)
	}
	if err := os.CopyFS(filepath.Join(out, "chart"), os.DirFS(filepath.Join(src, "deploy/helm/slingshot"))); err != nil {
		return fmt.Errorf("baseline %s: its chart: %w", commit, err)
	}
	return nil
}

// commitLDFlags stamp the binaries of the working tree at repoDir with
// its commit, as the Makefile's builds do ("-dirty" when tracked files
// changed), so that slingshot_build_info tells HEAD's build from the
// baseline's (the go command's own VCS stamp may be off: -buildvcs=false);
// none where git cannot say, which only a baseline needs.
func commitLDFlags(ctx context.Context, repoDir string) string {
	commit, err := git(ctx, repoDir, "rev-parse", "HEAD")
	if err != nil {
		return ""
	}
	if _, err := git(ctx, repoDir, "diff", "--quiet", "HEAD", "--"); err != nil {
		commit += "-dirty"
	}
	return "-X " + versionPkg + ".Commit=" + commit
}

// git runs git in dir and returns its trimmed output.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// loadSource describes the build whose binaries are in bin and whose
// chart is chartDir, from what its agent binary says (--version); tag ""
// takes its version.
func loadSource(ctx context.Context, name, bin, chartDir, tag string) (*Source, error) {
	agent := filepath.Join(bin, "slingshot-agent")
	out, err := exec.CommandContext(ctx, agent, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %s --version: %w", name, agent, err)
	}
	s := &Source{Name: name, ChartDir: chartDir, Tag: tag, bin: bin}
	// "slingshot-agent 0.2.0\ncommit:     <hash>\n..." (internal/version).
	for i, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case i == 0 && len(f) == 2:
			s.Version = f[1]
		case len(f) == 2 && f[0] == "commit:":
			s.Commit = f[1]
		}
	}
	if s.Version == "" || s.Commit == "" {
		return nil, fmt.Errorf("%s: %s --version said %q: no version or commit", name, agent, out)
	}
	if s.Tag == "" {
		s.Tag = s.Version
	}
	return s, nil
}
