package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// SchemaVersion is the schema this package writes.
const SchemaVersion = 3

// ErrSchemaTooNew is returned by Open for a database of a newer schema.
var ErrSchemaTooNew = errors.New("database schema newer than this binary")

var migrations = []string{
	// v1
	`CREATE TABLE meta (
		key TEXT PRIMARY KEY,
		value TEXT NOT NULL,
		version INTEGER NOT NULL
	);
	CREATE TABLE vni_leases (
		key TEXT PRIMARY KEY,
		vni INTEGER NOT NULL UNIQUE CHECK (vni BETWEEN 1 AND 65535),
		scope TEXT NOT NULL,
		owner_api_version TEXT NOT NULL,
		owner_kind TEXT NOT NULL,
		owner_namespace TEXT NOT NULL,
		owner_name TEXT NOT NULL,
		owner_uid TEXT NOT NULL,
		nodes TEXT NOT NULL,
		owner_gone INTEGER NOT NULL,
		created_ms INTEGER NOT NULL,
		version INTEGER NOT NULL
	);
	CREATE TABLE vni_quarantine (
		vni INTEGER PRIMARY KEY CHECK (vni BETWEEN 1 AND 65535),
		released_ms INTEGER NOT NULL,
		version INTEGER NOT NULL
	);
	CREATE TABLE node_slices (
		pool TEXT NOT NULL,
		idx INTEGER NOT NULL,
		node TEXT NOT NULL,
		expires_ms INTEGER NOT NULL,
		allocated INTEGER NOT NULL,
		reported_ms INTEGER NOT NULL,
		version INTEGER NOT NULL,
		PRIMARY KEY (pool, idx)
	);`,
	// v2: whether the node allocates from the slice without further report.
	`ALTER TABLE node_slices ADD COLUMN open INTEGER NOT NULL DEFAULT 0;`,
	// v3: the job object of the lease's hardware-collectives reservation.
	`ALTER TABLE vni_leases ADD COLUMN hwcoll_job TEXT NOT NULL DEFAULT '';`,
}

// Store is a sqlite-backed [store.Store]. It is safe for concurrent use.
type Store struct {
	db *sql.DB

	stmts map[stmtKey]*sql.Stmt
}

var _ store.Store = (*Store)(nil)

// Open opens or creates the database at path and migrates its schema. It
// returns an error wrapping ErrSchemaTooNew for a newer schema.
func Open(ctx context.Context, path string) (*Store, error) {
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(5000)", "foreign_keys(ON)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// One connection: the controller is the single writer, and a single
	// connection keeps the pragmas and avoids lock contention with itself.
	db.SetMaxOpenConns(1)
	s := &Store{db: db, stmts: map[stmtKey]*sql.Stmt{}}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := s.prepare(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return s, nil
}

// uriPath escapes the characters that would end or alter a path in an
// SQLite URI filename, so that a --db path containing them names the file
// it says rather than starting the query or fragment.
func uriPath(path string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
}

func (s *Store) migrate(ctx context.Context) error {
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("%w: schema v%d, this binary knows v%d", ErrSchemaTooNew, v, len(migrations))
	}
	for ; v < len(migrations); v++ {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrate to v%d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate to v%d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate to v%d: %w", v+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate to v%d: %w", v+1, err)
		}
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error {
	for _, st := range s.stmts {
		st.Close()
	}
	return s.db.Close()
}

// tables describes each table's key and columns, for the statements
// prepared at Open.
var tables = map[string]struct {
	keyWhere string
	cols     []string
}{
	"vni_leases": {"key = ?", []string{"key", "vni", "scope", "owner_api_version", "owner_kind", "owner_namespace",
		"owner_name", "owner_uid", "nodes", "owner_gone", "created_ms", "hwcoll_job"}},
	"vni_quarantine": {"vni = ?", []string{"vni", "released_ms"}},
	"node_slices":    {"pool = ? AND idx = ?", []string{"pool", "idx", "node", "expires_ms", "allocated", "reported_ms", "open"}},
	"meta":           {"key = ?", []string{"key", "value"}},
}

type stmtKind int

const (
	stmtDelete stmtKind = iota
	stmtExists
	stmtInsert
	stmtUpdate
)

func statementSQL(table string, kind stmtKind) string {
	t := tables[table]
	switch kind {
	case stmtDelete:
		return "DELETE FROM " + table + " WHERE " + t.keyWhere + " AND version = ?"
	case stmtExists:
		return "SELECT count(*) FROM " + table + " WHERE " + t.keyWhere
	case stmtInsert:
		ph := strings.TrimSuffix(strings.Repeat("?, ", len(t.cols)+1), ", ")
		return "INSERT INTO " + table + " (" + strings.Join(t.cols, ", ") + ", version) VALUES (" + ph + ")"
	default:
		return "UPDATE " + table + " SET " + strings.Join(t.cols, " = ?, ") + " = ?, version = ? WHERE " + t.keyWhere + " AND version = ?"
	}
}

// prepare prepares every write statement once: parsing dominates the cost
// of small writes.
func (s *Store) prepare(ctx context.Context) error {
	for table := range tables {
		for _, k := range []stmtKind{stmtDelete, stmtExists, stmtInsert, stmtUpdate} {
			st, err := s.db.PrepareContext(ctx, statementSQL(table, k))
			if err != nil {
				return fmt.Errorf("prepare: %w", err)
			}
			s.stmts[stmtKey{table, k}] = st
		}
	}
	return nil
}

type stmtKey struct {
	table string
	kind  stmtKind
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// Load implements [store.Store].
func (s *Store) Load(ctx context.Context) (*store.State, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	defer tx.Rollback()
	st := &store.State{}
	if err := query(ctx, tx, "SELECT key, value, version FROM meta ORDER BY key", func(r *sql.Rows) error {
		var m store.Meta
		if err := r.Scan(&m.Key, &m.Value, &m.Version); err != nil {
			return err
		}
		st.Meta = append(st.Meta, m)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load meta: %w", err)
	}
	if err := query(ctx, tx, `SELECT key, vni, scope, owner_api_version, owner_kind, owner_namespace,
		owner_name, owner_uid, nodes, owner_gone, created_ms, hwcoll_job, version FROM vni_leases ORDER BY key`, func(r *sql.Rows) error {
		var l store.Lease
		var nodes string
		var created int64
		if err := r.Scan(&l.Key, &l.VNI, &l.Scope, &l.Owner.APIVersion, &l.Owner.Kind, &l.Owner.Namespace,
			&l.Owner.Name, &l.Owner.UID, &nodes, &l.OwnerGone, &created, &l.HWCollJob, &l.Version); err != nil {
			return err
		}
		if nodes != "" {
			l.Nodes = strings.Split(nodes, ",")
		}
		l.Created = fromMS(created)
		st.Leases = append(st.Leases, l)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load leases: %w", err)
	}
	if err := query(ctx, tx, "SELECT vni, released_ms, version FROM vni_quarantine ORDER BY released_ms, vni", func(r *sql.Rows) error {
		var q store.Quarantine
		var rel int64
		if err := r.Scan(&q.VNI, &rel, &q.Version); err != nil {
			return err
		}
		q.Released = fromMS(rel)
		st.Quarantine = append(st.Quarantine, q)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load quarantine: %w", err)
	}
	if err := query(ctx, tx, "SELECT pool, idx, node, expires_ms, allocated, reported_ms, open, version FROM node_slices ORDER BY pool, idx", func(r *sql.Rows) error {
		var sl store.Slice
		var exp, rep int64
		if err := r.Scan(&sl.Pool, &sl.Index, &sl.Node, &exp, &sl.Allocated, &rep, &sl.Open, &sl.Version); err != nil {
			return err
		}
		sl.Expires, sl.Reported = fromMS(exp), fromMS(rep)
		st.Slices = append(st.Slices, sl)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load slices: %w", err)
	}
	return st, nil
}

func query(ctx context.Context, tx *sql.Tx, q string, row func(*sql.Rows) error) error {
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Commit implements [store.Store]. It returns an error wrapping
// store.ErrConflict when an expected version differs.
func (s *Store) Commit(ctx context.Context, ops []store.Op) error {
	if len(ops) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for i, op := range ops {
		if err := s.apply(ctx, tx, op); err != nil {
			tx.Rollback()
			return fmt.Errorf("commit op %d (%s): %w", i, op.Record.RecordKey(), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// write runs a put or a delete with its version check: a put over version 0
// is an insert (refused if the row exists), any other put an update of the
// row at the expected version, a delete a delete at that version.
func (s *Store) write(ctx context.Context, tx *sql.Tx, op store.Op, table string, keyArgs, vals []any) error {
	exec := func(k stmtKind, args ...any) (sql.Result, error) {
		return tx.StmtContext(ctx, s.stmts[stmtKey{table, k}]).ExecContext(ctx, args...)
	}
	var res sql.Result
	var err error
	switch {
	case op.Kind == store.OpDelete:
		if op.Expect == 0 {
			return errors.New("delete needs an expected version")
		}
		res, err = exec(stmtDelete, append(keyArgs, op.Expect)...)
	case op.Kind == store.OpPut && op.Expect == 0:
		var exists int
		if err := tx.StmtContext(ctx, s.stmts[stmtKey{table, stmtExists}]).QueryRowContext(ctx, keyArgs...).Scan(&exists); err != nil {
			return err
		}
		if exists != 0 {
			return fmt.Errorf("%w: record exists, expected none", store.ErrConflict)
		}
		res, err = exec(stmtInsert, append(vals, 1)...)
	case op.Kind == store.OpPut:
		res, err = exec(stmtUpdate, append(append(vals, op.Expect+1), append(keyArgs, op.Expect)...)...)
	default:
		return fmt.Errorf("unknown op kind %d", op.Kind)
	}
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: expected version %d", store.ErrConflict, op.Expect)
	}
	return nil
}

func (s *Store) apply(ctx context.Context, tx *sql.Tx, op store.Op) error {
	switch r := op.Record.(type) {
	case *store.Lease:
		return s.write(ctx, tx, op, "vni_leases", []any{r.Key},
			[]any{r.Key, r.VNI, string(r.Scope), r.Owner.APIVersion, r.Owner.Kind, r.Owner.Namespace, r.Owner.Name,
				r.Owner.UID, strings.Join(r.Nodes, ","), r.OwnerGone, ms(r.Created), r.HWCollJob})
	case *store.Quarantine:
		return s.write(ctx, tx, op, "vni_quarantine", []any{r.VNI}, []any{r.VNI, ms(r.Released)})
	case *store.Slice:
		return s.write(ctx, tx, op, "node_slices", []any{r.Pool, r.Index},
			[]any{r.Pool, r.Index, r.Node, ms(r.Expires), r.Allocated, ms(r.Reported), r.Open})
	case *store.Meta:
		return s.write(ctx, tx, op, "meta", []any{r.Key}, []any{r.Key, r.Value})
	case nil:
		return errors.New("op without a record")
	default:
		return fmt.Errorf("unknown record type %T", r)
	}
}
