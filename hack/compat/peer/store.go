package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	ctlslices "github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// The controller's sqlite database, written and read by the tree's own
// code: its store (controller/store/sqlite) for random states, and its
// controller (controller.Allocator) run over it. Both trees' store and
// controller APIs used here are 0.2.0's; a change to them in HEAD moves
// the changed part to head.go, as for the checkpoint.

// dbName is the database's name, as the chart's --store names it.
const dbName = "controller.db"

// storeSchema is the store's State as encoding/json writes it: how a
// state travels between the test and the peers.
func storeSchema() []SchemaPath {
	var out []SchemaPath
	schemaOf(reflect.TypeFor[store.State](), "", false, &out)
	return out
}

type storeWriteArgs struct {
	// State is a store.State; each record is written at its Version
	// (inserted, then updated until it has it).
	State json.RawMessage `json:"state"`
	// Gone is a store.State of records written as State's are and then
	// deleted: a database with a history.
	Gone json.RawMessage `json:"gone"`
}

// decodeState reads a store.State, refusing a field the tree's types
// lack: what the test generates is the baseline's schema, no more.
func decodeState(b json.RawMessage) (*store.State, error) {
	st := &store.State{}
	if len(b) == 0 {
		return st, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(st); err != nil {
		return nil, fmt.Errorf("not this tree's store state: %w", err)
	}
	return st, nil
}

// records are st's records, with the versions st gives them.
func records(st *store.State) []store.Record {
	var out []store.Record
	for i := range st.Meta {
		out = append(out, &st.Meta[i])
	}
	for i := range st.Leases {
		out = append(out, &st.Leases[i])
	}
	for i := range st.Quarantine {
		out = append(out, &st.Quarantine[i])
	}
	for i := range st.Slices {
		out = append(out, &st.Slices[i])
	}
	return out
}

func recordVersion(r store.Record) uint64 {
	switch r := r.(type) {
	case *store.Meta:
		return r.Version
	case *store.Lease:
		return r.Version
	case *store.Quarantine:
		return r.Version
	case *store.Slice:
		return r.Version
	}
	return 0
}

// writeRecords inserts recs and updates each until it has its version,
// one commit per round, as the controller commits batches.
func writeRecords(ctx context.Context, s store.Store, recs []store.Record) error {
	for v := uint64(0); ; v++ {
		var ops []store.Op
		for _, r := range recs {
			if recordVersion(r) > v {
				ops = append(ops, store.Put(r, v))
			}
		}
		if len(ops) == 0 {
			return nil
		}
		if err := s.Commit(ctx, ops); err != nil {
			return fmt.Errorf("write version %d: %w", v+1, err)
		}
	}
}

func storeWrite(ctx context.Context, a storeWriteArgs) (any, error) {
	st, err := decodeState(a.State)
	if err != nil {
		return nil, err
	}
	gone, err := decodeState(a.Gone)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "peer-db-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s, err := sqlite.Open(ctx, filepath.Join(dir, dbName))
	if err != nil {
		return nil, err
	}
	err = writeRecords(ctx, s, append(records(st), records(gone)...))
	if err == nil {
		var ops []store.Op
		for _, r := range records(gone) {
			ops = append(ops, store.Delete(r, recordVersion(r)))
		}
		if len(ops) > 0 {
			err = s.Commit(ctx, ops)
		}
	}
	if err = errors.Join(err, s.Close()); err != nil {
		return nil, err
	}
	return readDir(dir)
}

// readDir returns the regular files of dir by name: the database and
// whatever sqlite left beside it.
func readDir(dir string) (Files, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := Files{}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out[e.Name()] = b
	}
	return out, nil
}

// writeDir writes files into a new temporary directory.
func writeDir(files Files) (string, error) {
	dir, err := os.MkdirTemp("", "peer-db-")
	if err != nil {
		return "", err
	}
	for name, b := range files {
		if name != filepath.Base(name) {
			os.RemoveAll(dir)
			return "", fmt.Errorf("file name %q", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// storeErrKind names the class of an error opening a database: "too new"
// (a schema the tree does not know), or "other".
func storeErrKind(err error) string {
	if errors.Is(err, sqlite.ErrSchemaTooNew) {
		return "too new"
	}
	return "other"
}

type storeReadArgs struct {
	Files Files `json:"files"`
}

// StoreRead is what a tree made of a database: its state (instants in
// UTC), or the error and its kind; the files as it left them (opening
// migrates an older schema); and the schema version they hold.
type StoreRead struct {
	State  json.RawMessage `json:"state,omitempty"`
	Err    string          `json:"err,omitempty"`
	Kind   string          `json:"kind,omitempty"`
	Files  Files           `json:"files"`
	Schema int             `json:"schema"`
}

func storeRead(ctx context.Context, a storeReadArgs) (any, error) {
	dir, err := writeDir(a.Files)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, dbName)
	var res StoreRead
	if s, err := sqlite.Open(ctx, path); err != nil {
		res.Err, res.Kind = err.Error(), storeErrKind(err)
	} else {
		st, err := s.Load(ctx)
		if err = errors.Join(err, s.Close()); err != nil {
			res.Err, res.Kind = err.Error(), "other"
		} else if res.State, err = json.Marshal(inUTC(st)); err != nil {
			return nil, err
		}
	}
	if res.Schema, err = userVersion(ctx, path, -1); err != nil {
		return nil, err
	}
	if res.Files, err = readDir(dir); err != nil {
		return nil, err
	}
	return res, nil
}

// inUTC returns st with its instants in UTC (the store reads them in
// local time).
func inUTC(st *store.State) *store.State {
	for i := range st.Leases {
		st.Leases[i].Created = st.Leases[i].Created.UTC()
	}
	for i := range st.Quarantine {
		st.Quarantine[i].Released = st.Quarantine[i].Released.UTC()
	}
	for i := range st.Slices {
		st.Slices[i].Expires, st.Slices[i].Reported = st.Slices[i].Expires.UTC(), st.Slices[i].Reported.UTC()
	}
	return st
}

// userVersion returns the schema version of the database at path, after
// setting it to set unless set is negative: sqlite's user_version, which
// the store keeps its schema in. It uses the driver the store registers,
// not the store.
func userVersion(ctx context.Context, path string, set int) (int, error) {
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	if set >= 0 {
		if _, err := db.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", set)); err != nil {
			return 0, fmt.Errorf("set the schema version: %w", err)
		}
	}
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	return v, db.Close()
}

type storeSetSchemaArgs struct {
	Files  Files `json:"files"`
	Schema int   `json:"schema"`
}

// storeSetSchema marks a database as of another schema version: one
// from a release that does not exist yet.
func storeSetSchema(ctx context.Context, a storeSetSchemaArgs) (any, error) {
	dir, err := writeDir(a.Files)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if _, err := userVersion(ctx, filepath.Join(dir, dbName), a.Schema); err != nil {
		return nil, err
	}
	return readDir(dir)
}

// ctlConfig is the controller's configuration in every run, the same in
// both trees: a database is opened with the ranges and pools it was
// written with. Nothing expires or is swept while a run lasts.
func ctlConfig() controller.Config {
	return controller.Config{
		VNIRange:        vnialloc.Range{Min: 1024, Max: 4095},
		PodVNIRange:     vnialloc.Range{Min: 2048, Max: 2303},
		PodVNISliceSize: 32,
		IPPools:         []ctlslices.PoolSpec{{Name: "hsn", Prefix: netip.MustParsePrefix("10.64.0.0/20"), SliceSize: 24}},
		Quarantine:      time.Hour,
		SliceTTL:        time.Hour,
		SweepInterval:   time.Hour,
		HoldGrace:       -1,
	}
}

// ctlNamespace holds the runs' pods, jobs and claims.
const ctlNamespace = "compat"

// HeldPod is a pod whose VNI a run leased on its node, held still.
type HeldPod struct {
	Pod  string `json:"pod"`
	UID  string `json:"uid"`
	Node string `json:"node"`
	// Job is the pod's controlling Job; Claim the VNIClaim whose VNI it
	// asked for instead, if any.
	Job   string `json:"job"`
	Claim string `json:"claim,omitempty"`
	VNI   uint16 `json:"vni"`
	Key   string `json:"key"`
}

type ctlRunArgs struct {
	Seed uint64 `json:"seed"`
	// Files is the database to run on; none: a new one.
	Files Files `json:"files,omitempty"`
	// Held are pods an earlier run leased VNIs to: each is acquired
	// again, on its node, before anything else.
	Held []HeldPod `json:"held,omitempty"`
}

// CtlView is what the controller says it holds: leases, quarantined VNIs
// and leased slices (without their expiry, which a controller grants
// anew when it loads), instants in UTC to the millisecond.
type CtlView struct {
	Leases      []controller.Lease       `json:"leases"`
	Quarantined []controller.Quarantined `json:"quarantined"`
	Slices      []CtlSlice               `json:"slices"`
}

// CtlSlice is a leased slice: its VNIs or prefix as text, and whether
// the node's last report had ids in use from it: what the store keeps of
// the count, which the controller renews in memory only (what reclaim
// reads after a restart).
type CtlSlice struct {
	Pool  string `json:"pool"`
	Index int    `json:"index"`
	Range string `json:"range"`
	Node  string `json:"node"`
	InUse bool   `json:"inUse"`
	Open  bool   `json:"open"`
}

// CtlRun is what a run did: what the controller loaded (Before), the VNIs
// Held were answered again, the pods held at the end (Held's and the
// run's own), what it holds at the end (After), and the database it left;
// or the error that stopped it and its kind.
type CtlRun struct {
	Err    string    `json:"err,omitempty"`
	Kind   string    `json:"kind,omitempty"`
	Before CtlView   `json:"before"`
	Again  []uint16  `json:"again"`
	Held   []HeldPod `json:"held"`
	After  CtlView   `json:"after"`
	Files  Files     `json:"files"`
}

// ctlRun runs the tree's controller over the database, as the controller
// binary does (sqlite.Open, controller.New, Run): it acquires Held's pods
// again, then leases and releases at random from the seed (jobs' pods on
// nodes, a VNIClaim's, owners that end, node slices of the pod VNI pool
// and an IP pool, with renewals), and stops.
func ctlRun(ctx context.Context, a ctlRunArgs) (any, error) {
	dir, err := writeDir(a.Files)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var res CtlRun
	if err := runController(ctx, filepath.Join(dir, dbName), a, &res); err != nil {
		res.Err, res.Kind = err.Error(), storeErrKind(err)
		return res, nil
	}
	if res.Files, err = readDir(dir); err != nil {
		return nil, err
	}
	return res, nil
}

// loadTimeout bounds the controller's load of a small database.
const loadTimeout = 30 * time.Second

func runController(ctx context.Context, path string, a ctlRunArgs, res *CtlRun) (err error) {
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	jobs := controllertest.NewJobs()
	svc, err := controller.New(st, jobs, nil, ctlConfig())
	if err != nil {
		return errors.Join(err, st.Close())
	}
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(rctx) }()
	defer func() {
		cancel()
		err = errors.Join(err, <-ran, st.Close())
	}()
	select {
	case <-svc.Loaded():
	case err := <-ran:
		ran <- nil // told here
		return fmt.Errorf("controller stopped before it loaded: %w", err)
	case <-time.After(loadTimeout):
		return fmt.Errorf("controller did not load within %v", loadTimeout)
	}
	if res.Before, err = view(svc); err != nil {
		return err
	}
	res.Again = []uint16{}
	for _, h := range a.Held {
		l, err := acquirePod(ctx, svc, jobs, h)
		if err != nil {
			return fmt.Errorf("acquire held pod %s again: %w", h.Pod, err)
		}
		res.Again = append(res.Again, l.VNI)
	}
	if res.Held, err = scenario(ctx, svc, jobs, a.Seed, a.Held); err != nil {
		return err
	}
	res.After, err = view(svc)
	return err
}

// acquirePod tells the resolver of h's job (and claim) and acquires h's
// VNI on its node.
func acquirePod(ctx context.Context, svc *controller.Allocator, jobs *controllertest.Jobs, h HeldPod) (controller.Lease, error) {
	jobs.Add(h.Pod, controllertest.Job(ctlNamespace, h.Job))
	policy := ""
	if h.Claim != "" {
		policy = "claim:" + h.Claim
	}
	return svc.AcquireJobVNIWithPolicy(ctx, controller.PodRef{Namespace: ctlNamespace, Name: h.Pod, UID: h.UID}, h.Node, policy)
}

var ctlNodes = []string{"node-a", "node-b", "node-c", "node-d"}

// scenario leases and releases at random; it returns the pods held at
// its end, held's among them. Its first job runs on, of its own lease:
// every run leases a VNI anew; its second, of two pods, one of them of a
// VNIClaim, ends: every run quarantines a VNI and leases a claim's.
func scenario(ctx context.Context, svc *controller.Allocator, jobs *controllertest.Jobs, seed uint64, held []HeldPod) ([]HeldPod, error) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	run := fmt.Sprintf("r%x", seed&0xffffff)
	out := slices.Clone(held)
	for j := range 2 + rng.IntN(3) {
		job := fmt.Sprintf("%s-job%d", run, j)
		var pods []HeldPod
		n := 1 + rng.IntN(3)
		if j == 1 {
			n = 2
		}
		for p := range n {
			h := HeldPod{Pod: fmt.Sprintf("%s-p%d", job, p), UID: fmt.Sprintf("uid-%s-%d", job, p),
				Node: ctlNodes[rng.IntN(len(ctlNodes))], Job: job}
			if j == 1 && p == 1 || j > 1 && rng.IntN(5) == 0 {
				h.Claim = fmt.Sprintf("%s-claim%d", run, rng.IntN(2))
			}
			l, err := acquirePod(ctx, svc, jobs, h)
			if err != nil {
				return nil, fmt.Errorf("acquire pod %s: %w", h.Pod, err)
			}
			h.VNI, h.Key = l.VNI, l.Key
			pods = append(pods, h)
		}
		if j == 1 || j > 1 && rng.IntN(3) == 0 {
			// The job ends: its pods release, its owner goes, its VNI is
			// quarantined (a claim's stays with the claim).
			for _, h := range pods {
				if _, err := svc.ReleaseJobVNI(ctx, h.Key, h.Node); err != nil {
					return nil, fmt.Errorf("release pod %s: %w", h.Pod, err)
				}
			}
			owner := controllertest.Job(ctlNamespace, job)
			jobs.End(owner)
			if _, _, err := svc.FinalizeOwner(ctx, owner, true); err != nil {
				return nil, fmt.Errorf("finalize job %s: %w", job, err)
			}
			continue
		}
		out = append(out, pods...)
	}
	for i, node := range ctlNodes {
		if i > 0 && rng.IntN(4) == 0 {
			continue // the first node's slices always are
		}
		var usage []controller.SliceUsage
		for _, pool := range []string{ctlslices.PodVNIPool, "hsn"} {
			got, err := svc.AcquireSlices(ctx, node, pool, 1+rng.IntN(2))
			if err != nil {
				return nil, fmt.Errorf("acquire slices of %s for %s: %w", pool, node, err)
			}
			for _, sl := range got {
				usage = append(usage, controller.SliceUsage{Pool: sl.Pool, Index: sl.Index, Allocated: rng.IntN(20), Open: rng.IntN(2) == 0})
			}
		}
		if _, _, err := svc.RenewSlices(ctx, node, usage); err != nil {
			return nil, fmt.Errorf("renew slices of %s: %w", node, err)
		}
	}
	return out, nil
}

// view is what svc holds now.
func view(svc *controller.Allocator) (CtlView, error) {
	leases, quarantined, err := svc.ListLeases()
	if err != nil {
		return CtlView{}, err
	}
	// As the store keeps them: instants to the millisecond, no nodes as
	// none (a lease made in this run holds them as the controller made
	// them, one loaded as the store read them).
	v := CtlView{Leases: leases, Quarantined: quarantined, Slices: []CtlSlice{}}
	for i := range v.Leases {
		v.Leases[i].Created = v.Leases[i].Created.UTC().Truncate(time.Millisecond)
		if len(v.Leases[i].Nodes) == 0 {
			v.Leases[i].Nodes = nil
		}
	}
	for i := range v.Quarantined {
		v.Quarantined[i].Released = v.Quarantined[i].Released.UTC().Truncate(time.Millisecond)
	}
	sl, _, err := svc.ListSlices("", "")
	if err != nil {
		return CtlView{}, err
	}
	for _, s := range sl {
		r := s.VNIs.String()
		if s.Prefix.IsValid() {
			r = s.Prefix.String()
		}
		v.Slices = append(v.Slices, CtlSlice{Pool: s.Pool, Index: s.Index, Range: r, Node: s.Node, InUse: s.Allocated != 0, Open: s.Open})
	}
	return v, nil
}
