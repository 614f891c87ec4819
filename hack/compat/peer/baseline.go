//go:build compat_baseline

// The baseline's side of the checkpoint, built only in the baseline's
// worktree (-tags compat_baseline). Its checkpoint package never changes,
// so this file may use its record types.

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
)

// writeFormats: the baseline writes format 3 and nothing else.
var writeFormats = []int{3}

const defaultFormat = 3

// stateFromMeaning decodes a format 3 meaning into the baseline's types,
// refusing a field they lack: what the test generates is the baseline's
// format, no more.
func stateFromMeaning(data json.RawMessage) (*checkpoint.State, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	st := &checkpoint.State{}
	if err := dec.Decode(st); err != nil {
		return nil, fmt.Errorf("not the baseline's format: %w", err)
	}
	return st, nil
}

// stateSchema is the baseline's format: its State type is the file's
// data.
func stateSchema() []SchemaPath {
	var out []SchemaPath
	schemaOf(reflect.TypeFor[checkpoint.State](), "", false, &out)
	return out
}

func writeSnapshot(path string, st *checkpoint.State, format int) error {
	if format != 3 {
		return fmt.Errorf("format %d: no writer", format)
	}
	return checkpoint.Save(path, st)
}

func writeStore(path, node string, st *checkpoint.State, format int) error {
	if err := writeSnapshot(path, st, format); err != nil {
		return err
	}
	s, err := checkpoint.Open(path, node)
	if err != nil {
		return err
	}
	return s.Save()
}

func openMeaning(path, node string) (json.RawMessage, error) {
	s, err := checkpoint.Open(path, node)
	if err != nil {
		return nil, err
	}
	return meaningOf(s.Snapshot())
}

func meaningOf(st *checkpoint.State) (json.RawMessage, error) {
	b, err := checkpoint.Marshal(st)
	if err != nil {
		return nil, err
	}
	return envelopeData(b)
}
