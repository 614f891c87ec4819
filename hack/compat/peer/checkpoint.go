package main

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
)

// fileName is the snapshot's name in the directories the peer writes and
// reads, as the agent names it; the journal is beside it.
const fileName = "checkpoint.json"

type encodeArgs struct {
	Node string `json:"node"`
	// State is the state's meaning: the "data" of a format 3 envelope.
	State json.RawMessage `json:"state"`
	// Mode "snapshot" writes the state as [checkpoint.Save] does; "store"
	// as a running agent leaves it: opened (the snapshot folded anew) and
	// saved once more (an entry in the journal).
	Mode string `json:"mode"`
	// Format to write; 0: the tree's default.
	Format int `json:"format"`
}

// Files are a checkpoint's files by name: the snapshot and, where there
// is one, the journal.
type Files map[string][]byte

func ckptEncode(a encodeArgs) (any, error) {
	if a.Format == 0 {
		a.Format = defaultFormat
	}
	if !slices.Contains(writeFormats, a.Format) {
		return nil, fmt.Errorf("this tree writes formats %v, not %d", writeFormats, a.Format)
	}
	st, err := stateFromMeaning(a.State)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	dir, err := os.MkdirTemp("", "peer-ckpt-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, fileName)
	switch a.Mode {
	case "snapshot":
		err = writeSnapshot(path, st, a.Format)
	case "store":
		err = writeStore(path, a.Node, st, a.Format)
	default:
		err = fmt.Errorf("unknown mode %q", a.Mode)
	}
	if err != nil {
		return nil, err
	}
	return readFiles(dir)
}

func readFiles(dir string) (Files, error) {
	out := Files{}
	for _, name := range []string{fileName, filepath.Base(checkpoint.JournalPath(fileName))} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

type ckptDecodeArgs struct {
	Node  string `json:"node"`
	Files Files  `json:"files"`
}

// Decoded is what a reader made of a checkpoint: the state's meaning, or
// the error and its kind (errKind).
type Decoded struct {
	State json.RawMessage `json:"state,omitempty"`
	Err   string          `json:"err,omitempty"`
	Kind  string          `json:"kind,omitempty"`
}

type decodeResult struct {
	// Load is what [checkpoint.Load] read; Open what the agent's store
	// made of the files at start (which also checks the records' rules).
	Load Decoded `json:"load"`
	Open Decoded `json:"open"`
}

func ckptDecode(a ckptDecodeArgs) (any, error) {
	dir, err := os.MkdirTemp("", "peer-ckpt-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for name, b := range a.Files {
		if name != filepath.Base(name) {
			return nil, fmt.Errorf("file name %q", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	path := filepath.Join(dir, fileName)
	var res decodeResult
	if st, err := checkpoint.Load(path, a.Node); err != nil {
		res.Load = Decoded{Err: err.Error(), Kind: errKind(err)}
	} else if m, err := meaningOf(st); err != nil {
		return nil, err
	} else {
		res.Load.State = m
	}
	// Open folds the journal into the snapshot: it runs after Load, on
	// the same files.
	if m, err := openMeaning(path, a.Node); err != nil {
		res.Open = Decoded{Err: err.Error(), Kind: errKind(err)}
	} else {
		res.Open.State = m
	}
	return res, nil
}

// SchemaPath is one JSON path of the checkpoint state, as this tree's Go
// types encode it: object keys joined by ".", "*" for any key of a map,
// "[]" for the elements of an array. Kind is "map", "struct", "array",
// "time" or "scalar"; Ptr marks a pointer, whose presence means something
// even where its fields are all zero.
type SchemaPath struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	Ptr  bool   `json:"ptr,omitempty"`
}

var textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()

// schemaOf lists the JSON paths of t below path, as encoding/json
// encodes t.
func schemaOf(t reflect.Type, path string, ptr bool, out *[]SchemaPath) {
	if t.Kind() == reflect.Pointer {
		schemaOf(t.Elem(), path, true, out)
		return
	}
	add := func(kind string) { *out = append(*out, SchemaPath{Path: path, Kind: kind, Ptr: ptr}) }
	switch {
	case t == reflect.TypeFor[time.Time]():
		add("time")
	case t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler):
		add("scalar") // netip.Prefix and the like: a string
	case t.Kind() == reflect.Map:
		add("map")
		schemaOf(t.Elem(), join(path, "*"), false, out)
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		add("array")
		schemaOf(t.Elem(), path+"[]", false, out)
	case t.Kind() == reflect.Struct:
		if path != "" {
			add("struct")
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			schemaOf(f.Type, join(path, name), false, out)
		}
	default:
		add("scalar")
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
