package compat

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The agent's checkpoint files, as the peers name them.
const (
	snapshotName = "checkpoint.json"
	journalName  = "checkpoint.json.journal"
)

// files are a checkpoint's files by name (peer.Files).
type files map[string][]byte

// decoded is peer.Decoded.
type decoded struct {
	State json.RawMessage `json:"state"`
	Err   string          `json:"err"`
	Kind  string          `json:"kind"`
}

// Every checkpoint format the baseline reads or writes, read by HEAD, and
// what HEAD writes by default read by the baseline, for random states:
//
//   - upgrade: the baseline's files (a snapshot as checkpoint.Save writes
//     it, and the snapshot and journal a running agent leaves) read by
//     HEAD mean what the baseline wrote;
//   - rollback: HEAD's files in the format it writes by default read by
//     the baseline mean the same;
//   - a journal: a snapshot of one state and a journal entry of the next,
//     with a torn line after it (a crash mid-append), read across versions
//     as the newer state;
//   - formats 1 and 2, which older agents wrote and the baseline reads,
//     read by both alike;
//   - a format neither knows, and any format HEAD writes only when told
//     to that the baseline does not know, refused by the reader as a
//     version it does not know, never read as something else.
//
// "Mean" is the baseline's schema: both decode to the same values of
// every field the baseline has (state_test.go's norm).
func TestCheckpointFormats(t *testing.T) {
	w := setup(t)
	s := newSchema(w.oldInfo.StateSchema)
	g := &stateGen{rng: rand.New(rand.NewPCG(seed(), 1))}
	covered := map[string]bool{}
	var prevOld, prevNew files
	for i := range *statesFlag {
		node := g.dnsName()
		raw, err := json.Marshal(g.state(node, true))
		if err != nil {
			t.Fatal(err)
		}
		c := &ckptCase{t: t, w: w, s: s, n: i, node: node, raw: raw}
		s.setPaths(decodeJSON(raw), "", covered)
		want := s.norm(decodeJSON(raw), "")

		oldSnap, oldStore := c.encode(w.old, "snapshot", 0), c.encode(w.old, "store", 0)
		newSnap, newStore := c.encode(w.new, "snapshot", 0), c.encode(w.new, "store", 0)
		if t.Failed() {
			return
		}
		// The generator's states are the baseline's: it reads its own.
		c.expect(w.old, oldSnap, "the baseline's snapshot", want)
		c.expect(w.old, oldStore, "the baseline's snapshot and journal", want)
		// Upgrade.
		c.expect(w.new, oldSnap, "the baseline's snapshot", want)
		c.expect(w.new, oldStore, "the baseline's snapshot and journal", want)
		// Rollback.
		c.expect(w.old, newSnap, "HEAD's snapshot", want)
		c.expect(w.old, newStore, "HEAD's snapshot and journal", want)
		// The newest of snapshot and journal, across versions.
		if prevOld != nil {
			c.expect(w.new, c.splice(prevOld, oldStore), "the baseline's snapshot of the previous state and journal entry of this one, then a torn line", want)
			c.expect(w.old, c.splice(prevNew, newStore), "HEAD's snapshot of the previous state and journal entry of this one, then a torn line", want)
		}
		prevOld, prevNew = oldStore, newStore

		// Formats 2 (claims, no journal) and 1 (pods only), as agents
		// before the journal wrote them.
		v2 := files{snapshotName: c.envelope(2, raw)}
		var v1state map[string]any
		if err := json.Unmarshal(raw, &v1state); err != nil {
			t.Fatal(err)
		}
		delete(v1state, "claims")
		v1raw, err := json.Marshal(v1state)
		if err != nil {
			t.Fatal(err)
		}
		v1 := files{snapshotName: c.envelope(1, v1raw)}
		wantV1 := s.norm(decodeJSON(v1raw), "")
		for _, p := range []*peer{w.old, w.new} {
			c.expect(p, v2, "format 2", want)
			c.expect(p, v1, "format 1", wantV1)
		}

		// A format from the future is refused by both.
		future := max(w.oldInfo.CheckpointVersion, w.newInfo.CheckpointVersion) + 1
		for _, p := range []*peer{w.old, w.new} {
			c.refused(p, files{snapshotName: c.envelope(future, raw)}, fmt.Sprintf("format %d", future))
		}
		// What HEAD writes when told to: the baseline reads it, or
		// refuses it as a format it does not know.
		for _, f := range w.newInfo.WriteFormats {
			if f == w.newInfo.DefaultFormat {
				continue
			}
			fs := c.encode(w.new, "store", f)
			what := fmt.Sprintf("HEAD's format %d", f)
			c.expect(w.new, fs, what, want)
			if f <= w.oldInfo.CheckpointVersion {
				c.expect(w.old, fs, what, want)
			} else {
				c.refused(w.old, fs, what)
			}
		}
		if t.Failed() {
			return // one state's failures are enough to go on; the seed repeats them
		}
	}
	if w.newInfo.DefaultFormat > w.oldInfo.CheckpointVersion {
		failf(t, "HEAD writes format %d by default, which the baseline (reads up to %d) refuses: a rollback would leave every agent unable to start",
			w.newInfo.DefaultFormat, w.oldInfo.CheckpointVersion)
	}
	// Every field of the baseline's format was given a value: a field
	// the generator does not know would go untested.
	for _, leaf := range s.leaves() {
		if !covered[leaf] {
			failf(t, "in %d states the generator never set %s, a field of the baseline's checkpoint: teach state_test.go", *statesFlag, leaf)
		}
	}
}

// ckptCase is one random state and what the peers did with it.
type ckptCase struct {
	t    *testing.T
	w    *world
	s    schema
	n    int
	node string
	raw  json.RawMessage // the state's meaning
	told bool            // whether a failure showed raw
}

// errorf reports a failure of the case; the first shows the state.
func (c *ckptCase) errorf(format string, args ...any) {
	c.t.Helper()
	state := ""
	if !c.told {
		state, c.told = fmt.Sprintf(" %s", c.raw), true
	}
	failf(c.t, "state %d%s: %s", c.n, state, fmt.Sprintf(format, args...))
}

// encode has peer p write the state in mode and format (0: its default).
func (c *ckptCase) encode(p *peer, mode string, format int) files {
	c.t.Helper()
	var fs files
	if err := p.call("ckpt.encode", map[string]any{"node": c.node, "state": c.raw, "mode": mode, "format": format}, &fs); err != nil {
		c.errorf("%s mode %s: %v", p.name, mode, err)
	}
	return fs
}

func (c *ckptCase) decode(p *peer, fs files) (load, open decoded, ok bool) {
	c.t.Helper()
	var res struct {
		Load decoded `json:"load"`
		Open decoded `json:"open"`
	}
	if err := p.call("ckpt.decode", map[string]any{"node": c.node, "files": fs}, &res); err != nil {
		c.errorf("%v", err)
		return decoded{}, decoded{}, false
	}
	return res.Load, res.Open, true
}

// expect checks that p reads fs, with checkpoint.Load and as the agent
// opens its store, as want.
func (c *ckptCase) expect(p *peer, fs files, what string, want any) {
	c.t.Helper()
	load, open, ok := c.decode(p, fs)
	if !ok {
		return
	}
	for _, d := range []struct {
		how string
		d   decoded
	}{{"Load", load}, {"Open", open}} {
		if d.d.Err != "" {
			c.errorf("%s: the %s peer's %s refused it: %s", what, p.name, d.how, d.d.Err)
			continue
		}
		if diff := cmp.Diff(want, c.s.norm(decodeJSON(d.d.State), "")); diff != "" {
			c.errorf("%s: the %s peer's %s read another state (-written +read):\n%s", what, p.name, d.how, diff)
		}
	}
}

// refused checks that p refuses fs as a format it does not know.
func (c *ckptCase) refused(p *peer, fs files, what string) {
	c.t.Helper()
	load, open, ok := c.decode(p, fs)
	if !ok {
		return
	}
	for _, d := range []decoded{load, open} {
		if d.Kind != "version" {
			c.errorf("%s: the %s peer should refuse it as a version it does not know; it read %s (error %q)", what, p.name, d.State, d.Err)
		}
	}
}

// splice is the files an agent leaves when it opened prev's state (the
// snapshot), then saved cur's (an entry in the journal), and crashed
// while appending the next entry: prev's snapshot, cur's journal and half
// a line.
func (c *ckptCase) splice(prev, cur files) files {
	c.t.Helper()
	j := cur[journalName]
	if len(j) == 0 || j[len(j)-1] != '\n' {
		c.errorf("the store's files have no journal entry: %q", slices.Collect(maps.Keys(cur)))
		return cur
	}
	torn := append(bytes.Clone(j), j[:len(j)/2]...)
	return files{snapshotName: prev[snapshotName], journalName: torn}
}

// envelope frames data as a checkpoint file of the given version, as
// agent/checkpoint describes the format: the SHA-256 of the data as
// encoding/json writes it (compact, HTML-escaped), and the data. The
// test writes formats 1 and 2 itself: no tree writes them any more.
func (c *ckptCase) envelope(version int, data json.RawMessage) []byte {
	c.t.Helper()
	compact, err := json.Marshal(data)
	if err != nil {
		c.t.Fatal(err)
	}
	sum := sha256.Sum256(compact)
	b, err := json.Marshal(struct {
		Version  int             `json:"version"`
		Checksum string          `json:"checksum"`
		Data     json.RawMessage `json:"data"`
	}{version, hex.EncodeToString(sum[:]), compact})
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

// decodeJSON decodes b with numbers kept exact; nil for nothing.
func decodeJSON(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "undecodable: " + err.Error()
	}
	return v
}
