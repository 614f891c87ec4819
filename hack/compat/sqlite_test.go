package compat

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The controller's sqlite database (--store sqlite:PATH) across the two
// releases, written and read by each release's own code: its store
// (controller/store/sqlite) for random states, and its controller
// (controller.Allocator, as the binary runs it) for leases made and kept
// the way they are in a cluster. A release's database must open with the
// other's code, as both an upgrade and a rollback do; where a release
// writes a schema the other does not know, that one must refuse it as
// too new, never misread it (docs/upgrade.md, Rolling back).

var databasesFlag = flag.Int("compat.databases", 40, "random controller store states handed each way")

// storeRead is the peer's StoreRead.
type storeRead struct {
	State  json.RawMessage `json:"state"`
	Err    string          `json:"err"`
	Kind   string          `json:"kind"`
	Files  files           `json:"files"`
	Schema int             `json:"schema"`
}

// Every state of the baseline's store schema, written by the baseline's
// store, is read by HEAD's, and what HEAD's store writes is read by the
// baseline's, to the same records at the same versions (deleted records
// gone): the upgrade and the rollback of the controller's database. So is
// the baseline's database once HEAD's store has opened it (and migrated
// it, were its schema newer): a rollback after an upgrade. Where HEAD
// writes a newer schema the baseline must refuse it as too new; a schema
// neither knows both refuse so.
func TestControllerStoreStates(t *testing.T) {
	w := setup(t)
	s := newSchema(w.oldInfo.StoreSchema)
	g := &storeGen{rng: rand.New(rand.NewPCG(seed(), 3)), vnis: map[int]bool{}, qvnis: map[int]bool{}, slices: map[string]bool{}, keys: map[string]bool{}}
	covered := map[string]bool{}
	for i := range *databasesFlag {
		clear(g.vnis)
		clear(g.qvnis)
		clear(g.slices)
		clear(g.keys)
		st, gone := g.state(), g.state()
		raw, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		goneRaw, err := json.Marshal(gone)
		if err != nil {
			t.Fatal(err)
		}
		c := &dbCase{t: t, n: i, raw: raw, s: s}
		s.setPaths(decodeJSON(raw), "", covered)
		want := s.norm(decodeJSON(raw), "")

		oldDB, newDB := c.write(w.old, raw, goneRaw), c.write(w.new, raw, goneRaw)
		if t.Failed() {
			return
		}
		// The generator's states are the baseline's: it reads its own.
		c.expect(w.old, w.oldInfo, oldDB, "the baseline's database", want)
		// Upgrade.
		fromOld := c.expect(w.new, w.newInfo, oldDB, "the baseline's database", want)
		// Rollback: what HEAD wrote, and the baseline's database as HEAD's
		// store left it once it opened it.
		c.expect(w.old, w.oldInfo, newDB, "HEAD's database", want)
		c.expect(w.old, w.oldInfo, fromOld.Files, "the baseline's database after HEAD opened it", want)
		if i == 0 {
			// A schema from a release neither knows is refused by both.
			future := max(w.oldInfo.SQLiteSchema, w.newInfo.SQLiteSchema) + 1
			var fs files
			if err := w.old.call("store.setschema", map[string]any{"files": oldDB, "schema": future}, &fs); err != nil {
				t.Fatal(err)
			}
			for _, p := range []struct {
				p    *peer
				info peerInfo
			}{{w.old, w.oldInfo}, {w.new, w.newInfo}} {
				c.expect(p.p, p.info, fs, fmt.Sprintf("a database of schema %d", future), want)
			}
		}
		if t.Failed() {
			return // one state's failures are enough to go on; the seed repeats them
		}
	}
	for _, leaf := range s.leaves() {
		if !covered[leaf] {
			failf(t, "in %d states the generator never set %s, a field of the baseline's store: teach sqlite_test.go", *databasesFlag, leaf)
		}
	}
}

// dbCase is one random store state and what the peers did with it.
type dbCase struct {
	t    *testing.T
	n    int
	raw  json.RawMessage
	s    schema
	told bool
}

func (c *dbCase) errorf(format string, args ...any) {
	c.t.Helper()
	state := ""
	if !c.told {
		state, c.told = fmt.Sprintf(" %s", c.raw), true
	}
	failf(c.t, "store state %d%s: %s", c.n, state, fmt.Sprintf(format, args...))
}

// write has p's store write the state and the gone records (written,
// then deleted).
func (c *dbCase) write(p *peer, raw, gone json.RawMessage) files {
	c.t.Helper()
	var fs files
	if err := p.call("store.write", map[string]any{"state": raw, "gone": gone}, &fs); err != nil {
		c.errorf("%s: %v", p.name, err)
	}
	return fs
}

// expect checks that p's store reads fs as want, or, where fs holds a
// schema newer than p writes, refuses it as too new; it returns what p
// made of it.
func (c *dbCase) expect(p *peer, info peerInfo, fs files, what string, want any) storeRead {
	c.t.Helper()
	var r storeRead
	if err := p.call("store.read", map[string]any{"files": fs}, &r); err != nil {
		c.errorf("%s: %v", what, err)
		return r
	}
	if r.Schema > info.SQLiteSchema {
		if r.Kind != "too new" {
			c.errorf("%s: of schema %d, newer than the %s peer's %d: it should refuse it as too new; it read %s (error %q)",
				what, r.Schema, p.name, info.SQLiteSchema, r.State, r.Err)
		}
		return r
	}
	if r.Err != "" {
		c.errorf("%s: the %s peer's store refused it: %s", what, p.name, r.Err)
		return r
	}
	if r.Schema != info.SQLiteSchema {
		c.errorf("%s: the %s peer's store left schema %d, not its own %d", what, p.name, r.Schema, info.SQLiteSchema)
	}
	if diff := cmp.Diff(want, c.s.norm(decodeJSON(r.State), "")); diff != "" {
		c.errorf("%s: the %s peer's store read another state (-written +read):\n%s", what, p.name, diff)
	}
	return r
}

// storeGen makes random states of the controller's store, as the
// store's State type encodes them (Go field names), in the order the
// store loads them, within the database's constraints: a lease's VNI
// unique and 1 to 65535, a quarantined VNI unique, a slice unique by pool
// and index, a lease's nodes without commas (the column joins them),
// instants to the millisecond (what a column holds).
type storeGen struct {
	rng    *rand.Rand
	vnis   map[int]bool // lease VNIs taken in this database
	qvnis  map[int]bool // quarantined VNIs taken
	slices map[string]bool
	keys   map[string]bool // record keys taken, by kind
}

func (g *storeGen) state() map[string]any {
	st := map[string]any{}
	var meta, leases, quarantine, sl []map[string]any
	for range g.rng.IntN(4) {
		meta = append(meta, map[string]any{"Key": g.key("meta", g.word), "Value": g.maybe(g.word), "Version": g.version()})
	}
	for range g.rng.IntN(8) {
		leases = append(leases, g.lease())
	}
	for range g.rng.IntN(5) {
		v := g.unique(g.qvnis)
		quarantine = append(quarantine, map[string]any{"VNI": v, "Released": g.instant(), "Version": g.version()})
	}
	for range g.rng.IntN(6) {
		pool, idx := g.dnsName(), g.rng.IntN(1<<12)
		if g.slices[fmt.Sprint(pool, "/", idx)] {
			continue
		}
		g.slices[fmt.Sprint(pool, "/", idx)] = true
		sl = append(sl, map[string]any{"Pool": pool, "Index": idx, "Node": g.dnsName(), "Expires": g.instant(),
			"Allocated": g.rng.IntN(300), "Reported": g.instant(), "Open": g.rng.IntN(2) == 0, "Version": g.version()})
	}
	byKey := func(a, b map[string]any) int { return strings.Compare(a["Key"].(string), b["Key"].(string)) }
	slices.SortFunc(meta, byKey)
	slices.SortFunc(leases, byKey)
	slices.SortFunc(quarantine, func(a, b map[string]any) int {
		if c := cmpInstants(a["Released"].(string), b["Released"].(string)); c != 0 {
			return c
		}
		return a["VNI"].(int) - b["VNI"].(int)
	})
	slices.SortFunc(sl, func(a, b map[string]any) int {
		if c := strings.Compare(a["Pool"].(string), b["Pool"].(string)); c != 0 {
			return c
		}
		return a["Index"].(int) - b["Index"].(int)
	})
	for name, recs := range map[string][]map[string]any{"Meta": meta, "Leases": leases, "Quarantine": quarantine, "Slices": sl} {
		if len(recs) > 0 {
			st[name] = recs
		}
	}
	return st
}

func (g *storeGen) lease() map[string]any {
	scope := []string{"job", "pod", "claim"}[g.rng.IntN(3)]
	ns, uid := g.dnsName(), g.uid()
	l := map[string]any{
		"Key":   g.key("lease", func() string { return scope + "/" + ns + "/" + uid }),
		"VNI":   g.unique(g.vnis),
		"Scope": scope,
		"Owner": map[string]any{"APIVersion": g.maybe(func() string { return "batch/v1" }), "Kind": g.maybe(g.word),
			"Namespace": ns, "Name": g.maybe(g.word), "UID": g.maybe(g.uid)},
		"OwnerGone": g.rng.IntN(3) == 0,
		"Created":   g.instant(),
		"HWCollJob": g.maybe(g.word),
		"Version":   g.version(),
	}
	if n := g.rng.IntN(4); n > 0 {
		var nodes []string
		for range n {
			nodes = append(nodes, g.dnsName())
		}
		slices.Sort(nodes)
		l["Nodes"] = slices.Compact(nodes)
	}
	return l
}

// key returns a key of kind no record of this database has yet.
func (g *storeGen) key(kind string, f func() string) string {
	for {
		k := f()
		if !g.keys[kind+"/"+k] {
			g.keys[kind+"/"+k] = true
			return k
		}
	}
}

// unique returns a VNI (1 to 65535) not in taken, and takes it.
func (g *storeGen) unique(taken map[int]bool) int {
	for {
		v := 1 + g.rng.IntN(65535)
		if g.rng.IntN(8) == 0 {
			v = []int{1, 65535}[g.rng.IntN(2)]
		}
		if !taken[v] {
			taken[v] = true
			return v
		}
	}
}

func (g *storeGen) version() int { return 1 + g.rng.IntN(4) }

// instant is a random instant to the millisecond in UTC, or, one time in
// four, none (the zero time, which the store writes as 0).
func (g *storeGen) instant() string {
	if g.rng.IntN(4) == 0 {
		return time.Time{}.Format(time.RFC3339Nano)
	}
	return time.UnixMilli(1_600_000_000_000 + g.rng.Int64N(400_000_000_000)).UTC().Format(time.RFC3339Nano)
}

func (g *storeGen) word() string                 { return (&stateGen{rng: g.rng}).word() }
func (g *storeGen) dnsName() string              { return (&stateGen{rng: g.rng}).dnsName() }
func (g *storeGen) uid() string                  { return (&stateGen{rng: g.rng}).uid() }
func (g *storeGen) maybe(f func() string) string { return (&stateGen{rng: g.rng}).maybe(f) }

func cmpInstants(a, b string) int {
	ta, _ := time.Parse(time.RFC3339Nano, a)
	tb, _ := time.Parse(time.RFC3339Nano, b)
	return ta.Compare(tb)
}

// ctlRun is the peer's CtlRun; views are compared as JSON.
type ctlRun struct {
	Err    string           `json:"err"`
	Kind   string           `json:"kind"`
	Before json.RawMessage  `json:"before"`
	Again  []int            `json:"again"`
	Held   []map[string]any `json:"held"`
	After  json.RawMessage  `json:"after"`
	Files  files            `json:"files"`
}

// The controller of each release, run over the other's database as the
// binary runs it, loads the leases, quarantined VNIs and node slices the
// other left, answers every pod that holds a VNI with the same VNI, and
// leases new VNIs only where nothing holds or quarantines them; then the
// first release runs again over what the second left: an upgrade and a
// rollback with jobs running, both ways. Where the second release writes
// a schema the first does not know, the first must refuse it as too new
// (its controller does not start), never misread it.
func TestControllerDatabaseAcrossReleases(t *testing.T) {
	w := setup(t)
	for _, order := range []struct {
		first, second *peer
		firstInfo     peerInfo
		secondInfo    peerInfo
	}{{w.old, w.new, w.oldInfo, w.newInfo}, {w.new, w.old, w.newInfo, w.oldInfo}} {
		t.Run(order.first.name+" then "+order.second.name, func(t *testing.T) {
			a := runCtl(t, order.first, seed()+100, nil, nil)
			if a == nil {
				return
			}
			checkCovered(t, order.first, a)
			b := runCtl(t, order.second, seed()+101, a.Files, a.Held)
			if b == nil || !checkRun(t, order.second, order.secondInfo, a, b) {
				return
			}
			c := runCtl(t, order.first, seed()+102, b.Files, b.Held)
			if c == nil {
				return
			}
			checkRun(t, order.first, order.firstInfo, b, c)
		})
	}
}

// checkCovered fails unless run r left what the next release's
// controller is to load: pods holding VNIs, a VNIClaim's lease, a
// quarantined VNI, and slices of the pod VNI pool and of an IP pool.
func checkCovered(t *testing.T, p *peer, r *ctlRun) {
	t.Helper()
	var v struct {
		Leases []struct {
			Scope string
		} `json:"leases"`
		Quarantined []struct{ VNI int } `json:"quarantined"`
		Slices      []struct {
			Pool string `json:"pool"`
		} `json:"slices"`
	}
	if err := json.Unmarshal(r.After, &v); err != nil {
		t.Fatal(err)
	}
	pools := map[string]bool{}
	for _, s := range v.Slices {
		pools[s.Pool] = true
	}
	if len(r.Held) == 0 || !slices.ContainsFunc(v.Leases, func(l struct{ Scope string }) bool { return l.Scope == "claim" }) ||
		len(v.Quarantined) == 0 || !pools["pod-vni"] || !pools["hsn"] {
		t.Fatalf("the %s controller's run left too little to compare: %d held pods, leases %+v, %d quarantined VNIs, slices of %v",
			p.name, len(r.Held), v.Leases, len(v.Quarantined), pools)
	}
}

func runCtl(t *testing.T, p *peer, seed uint64, fs files, held []map[string]any) *ctlRun {
	t.Helper()
	var r ctlRun
	if err := p.call("ctl.run", map[string]any{"seed": seed, "files": fs, "held": held}, &r); err != nil {
		failf(t, "%v", err)
		return nil
	}
	if fs == nil && r.Err != "" {
		failf(t, "the %s controller on a new database: %s", p.name, r.Err)
		return nil
	}
	return &r
}

// checkRun checks run cur of p's controller over the database that run
// prev (of the other release) left; it reports whether cur ran.
func checkRun(t *testing.T, p *peer, info peerInfo, prev, cur *ctlRun) bool {
	t.Helper()
	if cur.Err != "" {
		// Only a schema p does not know may stop it, as too new.
		if cur.Kind != "too new" {
			failf(t, "the %s controller did not run over the other release's database: %s", p.name, cur.Err)
		} else if newest := dbSchema(prev.Files); newest <= info.SQLiteSchema {
			failf(t, "the %s controller refused the other release's database as too new: %s", p.name, cur.Err)
		}
		return false
	}
	if diff := cmp.Diff(decodeJSON(prev.After), decodeJSON(cur.Before)); diff != "" {
		failf(t, "the %s controller loaded other leases, quarantined VNIs or slices than the other release left (-left +loaded):\n%s", p.name, diff)
	}
	for i, h := range prev.Held {
		if i >= len(cur.Again) {
			failf(t, "the %s controller answered %d of %d held pods", p.name, len(cur.Again), len(prev.Held))
			break
		}
		if got, want := fmt.Sprint(cur.Again[i]), fmt.Sprint(h["vni"]); got != want {
			failf(t, "held pod %v: the %s controller answered VNI %s, the other release had leased it %s", h["pod"], p.name, got, want)
		}
	}
	// A VNI leased anew is none that the loaded state holds or
	// quarantines.
	var before, after struct {
		Leases []struct {
			Key string
			VNI int
		} `json:"leases"`
		Quarantined []struct{ VNI int } `json:"quarantined"`
	}
	if err := json.Unmarshal(cur.Before, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(cur.After, &after); err != nil {
		t.Fatal(err)
	}
	taken, known := map[int]string{}, map[string]bool{}
	for _, l := range before.Leases {
		if l.VNI != 0 {
			taken[l.VNI] = "leased to " + l.Key
		}
		known[l.Key] = true
	}
	for _, q := range before.Quarantined {
		taken[q.VNI] = "quarantined"
	}
	fresh := 0
	for _, l := range after.Leases {
		if known[l.Key] {
			continue
		}
		fresh++
		if why, ok := taken[l.VNI]; ok && l.VNI != 0 {
			failf(t, "the %s controller leased VNI %d to %s; the other release's database has it %s", p.name, l.VNI, l.Key, why)
		}
	}
	if fresh == 0 {
		failf(t, "the %s controller's run leased nothing new: nothing shows it keeps the loaded VNIs apart", p.name)
	}
	return true
}

// dbSchema is the schema version in a database's header (sqlite's
// user_version, which the store keeps its schema in: 4 bytes at 60), or
// 0 when the files hold none.
func dbSchema(fs files) int {
	db := fs[dbName]
	if len(db) < 64 {
		return 0
	}
	return int(db[60])<<24 | int(db[61])<<16 | int(db[62])<<8 | int(db[63])
}

// dbName is the database's file name (peer's dbName).
const dbName = "controller.db"

// docs/upgrade.md names the schema of the controller's database that
// HEAD writes ("sqlite schema vN"), so that a release that changes it says
// so where operators read what a rollback needs: an earlier controller
// refuses a newer schema, and the rollback restores the export taken
// before the upgrade.
func TestControllerSchemaDocumented(t *testing.T) {
	w := setup(t)
	b, err := os.ReadFile(filepath.Join(w.root, "docs", "upgrade.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("sqlite schema v%d", w.newInfo.SQLiteSchema)
	if !strings.Contains(string(b), want) {
		failf(t, "docs/upgrade.md does not say %q: HEAD's controller writes it (the baseline's is v%d); say in the release's notes whether the baseline's controller reads it, and what a rollback needs",
			want, w.oldInfo.SQLiteSchema)
	}
}
