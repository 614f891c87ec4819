//go:build !compat_baseline

// HEAD's side of the checkpoint: the one file to adjust when HEAD's
// checkpoint package changes its API. It uses only the package's stable
// surface (Marshal, Unmarshal, Save, Open and the Store's Save and
// Snapshot), never its record types, which change while the file format
// that a rollback needs stays; a state travels between the peers as its
// format 3 meaning, the "data" of a version 3 envelope.

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
)

// writeFormats are the formats HEAD's agent can be told to write
// (--checkpoint-format); defaultFormat is the one it writes untold, which
// the baseline must read. A format added here is checked against the
// baseline too: it must read it or refuse it as a version it does not
// know, never misread it.
var writeFormats = []int{checkpoint.DefaultFormat, checkpoint.Version}

const defaultFormat = checkpoint.DefaultFormat

// stateFromMeaning makes HEAD's state of a format 3 meaning the way HEAD
// reads any file: through [checkpoint.Unmarshal].
func stateFromMeaning(data json.RawMessage) (*checkpoint.State, error) {
	env, err := envelope(3, data)
	if err != nil {
		return nil, err
	}
	return checkpoint.Unmarshal(env)
}

// stateSchema is nil: the test takes the format's meaning from the
// baseline, whose State type is the file's data; HEAD's record types need
// not be.
func stateSchema() []SchemaPath { return nil }

func writeSnapshot(path string, st *checkpoint.State, format int) error {
	return checkpoint.Save(path, st, format)
}

// writeStore leaves the files as a running agent does: the state saved,
// the store opened on it (which folds it into a fresh snapshot) and saved
// once more (a journal entry).
func writeStore(path, node string, st *checkpoint.State, format int) error {
	if err := writeSnapshot(path, st, format); err != nil {
		return err
	}
	s, err := checkpoint.Open(path, node, format)
	if err != nil {
		return err
	}
	return s.Save()
}

// openMeaning opens the store as the agent does at start and returns the
// meaning of what it holds.
func openMeaning(path, node string) (json.RawMessage, error) {
	s, err := checkpoint.Open(path, node, defaultFormat)
	if err != nil {
		return nil, err
	}
	return meaningOf(s.Snapshot())
}

// meaningOf is the state's format 3 meaning: what HEAD writes by default.
func meaningOf(st *checkpoint.State) (json.RawMessage, error) {
	b, err := checkpoint.Marshal(st, 3)
	if err != nil {
		return nil, err
	}
	return envelopeData(b)
}

// envelope frames data as a checkpoint file of the given version: the
// format as docs/upgrade.md and agent/checkpoint describe it (version,
// the SHA-256 of the compact data, the data). Written here, not by the
// checkpoint package, so that a meaning can be handed to a tree whose
// record types differ from the format.
func envelope(version int, data json.RawMessage) ([]byte, error) {
	// encoding/json writes a RawMessage compacted and HTML-escaped: the
	// checksum is of those bytes, which the file will hold.
	compact, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("compact state: %w", err)
	}
	sum := sha256.Sum256(compact)
	return json.Marshal(struct {
		Version  int             `json:"version"`
		Checksum string          `json:"checksum"`
		Data     json.RawMessage `json:"data"`
	}{version, hex.EncodeToString(sum[:]), compact})
}
