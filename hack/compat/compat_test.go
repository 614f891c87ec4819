// The compatibility test of docs/upgrade.md: HEAD and the baseline
// release, built from this repository's own history, read each other's
// checkpoint files, controller API messages and errors, and CRDs.
//
// It makes a git worktree of the baseline commit, builds there the
// program in ./peer against the baseline's packages (-tags
// compat_baseline), builds the same program here against HEAD's (this
// module replaces the project with ../..), runs both, and hands what one
// writes to the other: randomly generated states and messages, from a
// seed that every failure names (-compat.seed reproduces a run).
//
// Nothing here is skipped: without git, or without the baseline commit in
// the clone's history (a shallow clone), the test fails and says so.
package compat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// baselineCommit is the first release, 0.2.0 (docs/upgrade.md names it):
// what HEAD must stay compatible with. Move it to the previous release
// when one is cut, as the version-skew policy moves.
const (
	baselineCommit  = "fbf5f6645911564b6c1245b0e5845db4e1aa7d08"
	baselineVersion = "0.2.0"
)

var (
	seedFlag     = flag.Uint64("compat.seed", 0, "seed of the random states and messages; 0: one from the clock (printed)")
	statesFlag   = flag.Int("compat.states", 150, "random checkpoint states handed each way")
	messagesFlag = flag.Int("compat.messages", 40, "random messages of each API type handed each way")
)

// seed is this run's, drawn once so that every test of a run (and a rerun
// with -compat.seed) uses the same.
var seed = sync.OnceValue(func() uint64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	return uint64(time.Now().UnixNano())
})

// failf reports a failure with the seed that reproduces it.
func failf(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Errorf("[seed %d: go test -run '%s' -compat.seed=%d] %s", seed(), t.Name(), seed(), fmt.Sprintf(format, args...))
}

// world is the two peers and the baseline's worktree, made once per test
// binary and removed by TestMain.
type world struct {
	tmp      string // everything the test made; the worktree inside it
	scratch  string // where the peers write checkpoint files
	root     string // this repository
	baseline string // the baseline's worktree
	old, new *peer
	oldInfo  peerInfo
	newInfo  peerInfo
}

var (
	theWorld *world
	worldErr error
	worldMu  sync.Mutex
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	worldMu.Lock()
	if theWorld != nil {
		if err := theWorld.close(); err != nil {
			fmt.Fprintln(os.Stderr, "compat: clean up:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	worldMu.Unlock()
	os.Exit(code)
}

// setup returns the peers, building them the first time.
func setup(t *testing.T) *world {
	t.Helper()
	worldMu.Lock()
	defer worldMu.Unlock()
	if theWorld == nil && worldErr == nil {
		start := time.Now()
		theWorld, worldErr = build()
		if worldErr == nil {
			t.Logf("baseline %s (%s) and HEAD (%s) built in %v; seed %d",
				baselineCommit[:12], theWorld.oldInfo.Version, theWorld.newInfo.Version, time.Since(start).Round(time.Millisecond), seed())
		}
	}
	if worldErr != nil {
		t.Fatal(worldErr)
	}
	return theWorld
}

func build() (w *world, err error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, fmt.Errorf("the compatibility test builds the baseline release from this repository's history and needs git: %w", err)
	}
	root, err := git("", "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, fmt.Errorf("find the repository: %w", err)
	}
	if _, err := git(root, "cat-file", "-e", baselineCommit+"^{commit}"); err != nil {
		return nil, fmt.Errorf("the baseline commit %s (release %s) is not in this clone's history, which the compatibility test builds it from: "+
			"clone with full history, or run `git fetch --unshallow` (%w)", baselineCommit, baselineVersion, err)
	}
	tmp, err := os.MkdirTemp("", "slingshot-compat-")
	if err != nil {
		return nil, err
	}
	w = &world{tmp: tmp, scratch: tmp, root: root, baseline: filepath.Join(tmp, "baseline")}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.close())
			w = nil
		}
	}()
	// The peers write and fsync thousands of small checkpoint files; on
	// a tmpfs that takes a third of the time, and what is compared is
	// their content, not their durability.
	if shm, err := os.MkdirTemp("/dev/shm", "slingshot-compat-"); err == nil {
		w.scratch = shm
	}
	if _, err := git(root, "worktree", "add", "--detach", "--quiet", w.baseline, baselineCommit); err != nil {
		return w, fmt.Errorf("make the baseline's worktree: %w", err)
	}
	// The peer's source goes into the baseline's module, where its
	// imports are the baseline's packages.
	peerDir := filepath.Join(w.baseline, "hack", "compat-peer")
	if err := copyGo("peer", peerDir); err != nil {
		return w, err
	}
	oldBin, newBin := filepath.Join(tmp, "old-peer"), filepath.Join(tmp, "new-peer")
	var oldErr, newErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		oldErr = goBuild(w.baseline, oldBin, "-tags", "compat_baseline", "./hack/compat-peer")
	})
	wg.Go(func() { newErr = goBuild(".", newBin, "./peer") })
	wg.Wait()
	if err := errors.Join(oldErr, newErr); err != nil {
		return w, err
	}
	if w.old, err = startPeer("baseline", oldBin, w.scratch); err != nil {
		return w, err
	}
	if w.new, err = startPeer("HEAD", newBin, w.scratch); err != nil {
		return w, err
	}
	if err := w.old.call("info", nil, &w.oldInfo); err != nil {
		return w, err
	}
	if err := w.new.call("info", nil, &w.newInfo); err != nil {
		return w, err
	}
	return w, nil
}

func (w *world) close() error {
	var errs []error
	for _, p := range []*peer{w.old, w.new} {
		if p != nil {
			errs = append(errs, p.close())
		}
	}
	if _, err := os.Stat(w.baseline); err == nil {
		if _, err := git(w.root, "worktree", "remove", "--force", w.baseline); err != nil {
			errs = append(errs, fmt.Errorf("remove the baseline's worktree: %w", err))
		}
	}
	errs = append(errs, os.RemoveAll(w.scratch), os.RemoveAll(w.tmp))
	return errors.Join(errs...)
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// buildTimeout bounds each build, so that a stuck one fails the test
// rather than outlive it.
const buildTimeout = 8 * time.Minute

func goBuild(dir, out string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	// -trimpath: the worktree's path changes every run; without it every
	// package built there would be built afresh rather than found in the
	// build cache.
	// -buildvcs=false: the peers need no VCS stamp, and git's view of a
	// fresh worktree is no business of theirs.
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-trimpath", "-buildvcs=false", "-o", out}, args...)...)
	cmd.Dir = dir
	// The baseline's worktree is its own module: no workspace joins it
	// to this one. Built as `make build` builds the binaries (static,
	// -trimpath), the packages the two trees share come from the build
	// cache that `make build` filled.
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", strings.Join(args, " "), dir, err, b)
	}
	return nil
}

// copyGo copies the Go files of dir src into a new directory dst.
func copyGo(src, dst string) error {
	files, err := filepath.Glob(filepath.Join(src, "*.go"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("the peer's source in %s: %d files, %v", src, len(files), err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// peer is a running peer program: one request at a time.
type peer struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer
	mu     sync.Mutex
}

// startPeer runs bin, its temporary files in tmp.
func startPeer(name, bin, tmp string) (*peer, error) {
	p := &peer{name: name, cmd: exec.Command(bin)}
	p.cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	p.cmd.Stderr = &p.stderr
	in, err := p.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the %s peer: %w", name, err)
	}
	p.in, p.out = in, bufio.NewReaderSize(out, 1<<20)
	return p, nil
}

// call sends one request and decodes its result into res.
func (p *peer) call(op string, args, res any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	req, err := json.Marshal(struct {
		Op   string `json:"op"`
		Args any    `json:"args,omitempty"`
	}{op, args})
	if err != nil {
		return fmt.Errorf("%s peer: encode %s: %w", p.name, op, err)
	}
	if _, err := p.in.Write(append(req, '\n')); err != nil {
		return fmt.Errorf("%s peer: send %s: %w (stderr: %s)", p.name, op, err, p.stderr.String())
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("%s peer: answer to %s: %w (stderr: %s)", p.name, op, err, p.stderr.String())
	}
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  string          `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&resp); err != nil {
		return fmt.Errorf("%s peer: decode the answer to %s: %w", p.name, op, err)
	}
	if resp.Error != "" {
		return fmt.Errorf("%s peer: %s", p.name, resp.Error)
	}
	if res == nil {
		return nil
	}
	dec = json.NewDecoder(bytes.NewReader(resp.Result))
	dec.UseNumber()
	if err := dec.Decode(res); err != nil {
		return fmt.Errorf("%s peer: decode the result of %s: %w", p.name, op, err)
	}
	return nil
}

func (p *peer) close() error {
	p.in.Close()
	err := p.cmd.Wait()
	if err != nil {
		return fmt.Errorf("%s peer: %w (stderr: %s)", p.name, err, p.stderr.String())
	}
	return nil
}

// peerInfo is the peer's Info (peer/main.go).
type peerInfo struct {
	Version           string       `json:"version"`
	UserAgent         string       `json:"userAgent"`
	CheckpointVersion int          `json:"checkpointVersion"`
	WriteFormats      []int        `json:"writeFormats"`
	DefaultFormat     int          `json:"defaultFormat"`
	StateSchema       []schemaPath `json:"stateSchema"`
	LeaseSchema       []schemaPath `json:"leaseSchema"`
	ProtoFile         []byte       `json:"protoFile"`
	Sentinels         []string     `json:"sentinels"`
	ControllerHeader  string       `json:"controllerHeader"`
	StoreSchema       []schemaPath `json:"storeSchema"`
	SQLiteSchema      int          `json:"sqliteSchema"`
}

// The versions the peers say are the trees': the baseline's release and
// HEAD's, which differ (else this test compares a tree with itself).
func TestPeersAreTheTwoReleases(t *testing.T) {
	w := setup(t)
	if w.oldInfo.Version != baselineVersion {
		failf(t, "the baseline peer says version %q; the baseline commit is release %s", w.oldInfo.Version, baselineVersion)
	}
	if w.newInfo.Version == w.oldInfo.Version {
		failf(t, "HEAD says the baseline's version %q: bump internal/version and the chart", w.newInfo.Version)
	}
}
