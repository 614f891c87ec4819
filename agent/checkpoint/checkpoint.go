// Package checkpoint is the node agent's own record of what it has
// programmed: per holder (a pod of the device plugin, a DRA claim), its
// VNI lease and the CXI services made for it on each NIC, in one record
// type, [Holder]. It is what lets a restarted agent tell its own services from
// anyone else's, keep those of live pods, and destroy the orphans.
//
// The record is JSON in a versioned envelope with a checksum and a
// sequence number, kept in two files: a snapshot, replaced atomically and
// durably, and beside it a journal to which each save appends the whole
// state as one line, made durable with one fdatasync (a tenth of the
// snapshot's cost: temporary file, fsync, rename, fsync of the directory).
// The newest entry of either wins. The journal is folded into the
// snapshot when it grows past a bound and at every start. A damaged
// snapshot or journal entry, or an unknown version, is an error, never
// silently an empty state; only a last journal line left unfinished by a
// crash is dropped: its save never returned.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/slingshot-k8s/slingshot/internal/atomicfile"
)

// Errors of [Load].
var (
	ErrCorrupt = errors.New("checkpoint corrupt")
	ErrVersion = errors.New("checkpoint version unsupported")
)

// State is everything the agent has programmed on this node.
type State struct {
	// Node is the node the state belongs to.
	Node string
	// Holders by [Holder.ID]: a pod's "namespace/name", a claim's
	// "claim:UID".
	Holders map[string]*Holder
}

// New returns an empty state for node.
func New(node string) *State { return &State{Node: node, Holders: map[string]*Holder{}} }

// Clone returns a deep copy, so a snapshot can be saved or shown while the
// live state keeps changing.
func (s *State) Clone() *State {
	c := &State{Node: s.Node, Holders: make(map[string]*Holder, len(s.Holders))}
	for id, h := range s.Holders {
		ch := h.Clone()
		c.Holders[id] = &ch
	}
	return c
}

// Of returns the holders of kind, ordered by ID.
func (s *State) Of(kind Kind) []*Holder {
	var out []*Holder
	for _, id := range s.IDs() {
		if h := s.Holders[id]; h.Kind == kind {
			out = append(out, h)
		}
	}
	return out
}

// envelope is the file format: the state's JSON, its checksum, and its
// sequence number, which orders the snapshot and the journal's entries.
type envelope struct {
	Version  int             `json:"version"`
	Seq      uint64          `json:"seq,omitempty"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// Marshal encodes the state in its versioned, checksummed envelope, in
// format version ([DefaultFormat] or [Version]), with sequence number 0.
func Marshal(s *State, version int) ([]byte, error) { return marshalSeq(s, version, 0) }

// marshalSeq encodes the state in an envelope of format version numbered
// seq, on one line.
func marshalSeq(s *State, version int, seq uint64) ([]byte, error) {
	if version < journalFormat || version > Version {
		return nil, fmt.Errorf("%w: this agent writes versions %d to %d, not %d", ErrVersion, journalFormat, Version, version)
	}
	data, err := encodeData(s, version)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	sum := sha256.Sum256(data)
	return json.Marshal(envelope{Version: version, Seq: seq, Checksum: hex.EncodeToString(sum[:]), Data: data})
}

// Unmarshal decodes an envelope written by [Marshal]. Errors match
// [ErrCorrupt] or [ErrVersion].
func Unmarshal(b []byte) (*State, error) {
	s, _, err := unmarshalSeq(b)
	return s, err
}

// unmarshalSeq decodes an envelope and returns its sequence number too.
func unmarshalSeq(b []byte) (*State, uint64, error) {
	s, env, err := unmarshalEnvelope(b)
	return s, env.Seq, err
}

func unmarshalEnvelope(b []byte) (*State, envelope, error) {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, env, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if env.Version < 1 || env.Version > Version {
		return nil, env, fmt.Errorf("%w: version %d, this agent reads 1 to %d", ErrVersion, env.Version, Version)
	}
	if env.Version < journalFormat && env.Seq != 0 {
		return nil, env, fmt.Errorf("%w: a version %d envelope with sequence number %d", ErrCorrupt, env.Version, env.Seq)
	}
	// The checksum covers the compact encoding, so reformatting the file
	// by hand is not damage but editing a value is.
	var compact bytes.Buffer
	if err := json.Compact(&compact, env.Data); err != nil {
		return nil, env, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	sum := sha256.Sum256(compact.Bytes())
	if hex.EncodeToString(sum[:]) != env.Checksum {
		return nil, env, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	s, err := decodeData(env.Data, env.Version)
	if err != nil {
		return nil, env, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return s, env, nil
}

// Load reads the checkpoint at path and its journal: the newest of the
// snapshot and the journal's entries. Missing files are an empty state for
// node, as on a first start.
func Load(path, node string) (*State, error) {
	st, _, _, err := load(path, node)
	return st, err
}

// load is Load that also returns the state's sequence number and the
// length of the journal's finished lines (a crash may have left a
// partial line after them).
func load(path, node string) (*State, uint64, int64, error) {
	st, seq, err := loadSnapshot(path, node)
	if err != nil {
		return nil, 0, 0, err
	}
	j, jseq, good, err := readJournal(path + journalSuffix)
	if err != nil {
		return nil, 0, 0, err
	}
	if j != nil && jseq > seq {
		st, seq = j, jseq
	}
	return st, seq, good, nil
}

func loadSnapshot(path, node string) (*State, uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return New(node), 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read checkpoint: %w", err)
	}
	s, seq, err := unmarshalSeq(b)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return s, seq, nil
}

// Save writes the state to path atomically and durably, as the snapshot
// in format version, and removes the journal beside it: the file then
// holds s alone. The agent saves through [Store].
func Save(path string, s *State, version int) error {
	b, err := Marshal(s, version)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	if err := os.Remove(path + journalSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove checkpoint journal: %w", err)
	}
	return nil
}
