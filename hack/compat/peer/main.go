// Command peer is one side of the compatibility test in hack/compat: it
// encodes and decodes what two releases exchange (the agent's checkpoint
// files, the controller API's messages and errors, and the controller's
// sqlite database) with the packages of the tree it is built in. The test builds it twice, against HEAD (this
// module, whose go.mod replaces the project with ../..) and inside a git
// worktree of the baseline release, and hands what one peer wrote to the
// other.
//
// It reads one JSON request per line on stdin, {"op": ..., "args": ...},
// and answers each with one line on stdout, {"result": ...} or
// {"error": ...}. Everything that depends on the tree's version of the
// checkpoint package's API is in head.go (HEAD) and baseline.go (the
// baseline, build tag compat_baseline); this file uses only what both
// have.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

type request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
}

type response struct {
	Result any    `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

func main() {
	if err := serve(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
}

// serve answers requests until in ends.
func serve(ctx context.Context, in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	// A request carries a batch of checkpoint files or messages.
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	for sc.Scan() {
		var req request
		var resp response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = fmt.Sprintf("decode request: %v", err)
		} else if res, err := handle(ctx, req); err != nil {
			resp.Error = fmt.Sprintf("%s: %v", req.Op, err)
		} else {
			resp.Result = res
		}
		if err := enc.Encode(resp); err != nil {
			return fmt.Errorf("write response: %w", err)
		}
		if err := w.Flush(); err != nil {
			return fmt.Errorf("write response: %w", err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	return nil
}

func handle(ctx context.Context, req request) (any, error) {
	switch req.Op {
	case "info":
		return info()
	case "ckpt.encode":
		return withArgs(req.Args, ckptEncode)
	case "ckpt.decode":
		return withArgs(req.Args, ckptDecode)
	case "proto.gen":
		return withArgs(req.Args, protoGen)
	case "proto.decode":
		return withArgs(req.Args, protoDecode)
	case "ua.parse":
		return withArgs(req.Args, func(a uaArgs) (any, error) {
			v, ok := version.FromUserAgent(a.UA, version.AgentProduct)
			return uaResult{Version: v, OK: ok}, nil
		})
	case "ctl.errors":
		return withArgs(req.Args, func(a ctlErrorsArgs) (any, error) { return ctlErrors(ctx, a) })
	case "client.read":
		return withArgs(req.Args, func(a clientArgs) (any, error) { return clientRead(ctx, a) })
	case "store.write":
		return withArgs(req.Args, func(a storeWriteArgs) (any, error) { return storeWrite(ctx, a) })
	case "store.read":
		return withArgs(req.Args, func(a storeReadArgs) (any, error) { return storeRead(ctx, a) })
	case "store.setschema":
		return withArgs(req.Args, func(a storeSetSchemaArgs) (any, error) { return storeSetSchema(ctx, a) })
	case "ctl.run":
		return withArgs(req.Args, func(a ctlRunArgs) (any, error) { return ctlRun(ctx, a) })
	}
	return nil, fmt.Errorf("unknown op %q", req.Op)
}

func withArgs[A any](raw json.RawMessage, f func(A) (any, error)) (any, error) {
	var a A
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("decode args: %w", err)
	}
	return f(a)
}

// Info is what a peer says of its tree.
type Info struct {
	// Version is the tree's release; UserAgent what its agent sends the
	// controller.
	Version   string `json:"version"`
	UserAgent string `json:"userAgent"`
	// CheckpointVersion is the newest checkpoint format the tree reads.
	CheckpointVersion int `json:"checkpointVersion"`
	// WriteFormats are the checkpoint formats the tree can be told to
	// write, DefaultFormat the one it writes unless told otherwise.
	WriteFormats  []int `json:"writeFormats"`
	DefaultFormat int   `json:"defaultFormat"`
	// StateSchema is the checkpoint state's JSON shape (see schemaOf);
	// LeaseSchema that of the lease the agent's controller client makes of
	// the controller's answer.
	StateSchema []SchemaPath `json:"stateSchema"`
	LeaseSchema []SchemaPath `json:"leaseSchema"`
	// ProtoFile is the controller API's FileDescriptorProto, encoded.
	ProtoFile []byte `json:"protoFile"`
	// Sentinels are the names of controllerclient's errors that
	// client.read matches.
	Sentinels []string `json:"sentinels"`
	// ControllerHeader is the gRPC header in which the tree's controller
	// names its release on every answer; "" for none.
	ControllerHeader string `json:"controllerHeader,omitempty"`
	// StoreSchema is the controller store's State as JSON (see schemaOf);
	// SQLiteSchema the schema version of the sqlite database the tree
	// writes, the newest it opens.
	StoreSchema  []SchemaPath `json:"storeSchema"`
	SQLiteSchema int          `json:"sqliteSchema"`
}

type uaArgs struct {
	UA string `json:"ua"`
}

type uaResult struct {
	Version string `json:"version"`
	OK      bool   `json:"ok"`
}

func info() (Info, error) {
	pf, err := protoFile()
	if err != nil {
		return Info{}, err
	}
	return Info{
		Version:           version.Version,
		UserAgent:         version.UserAgent(),
		CheckpointVersion: checkpoint.Version,
		WriteFormats:      writeFormats,
		DefaultFormat:     defaultFormat,
		StateSchema:       stateSchema(),
		LeaseSchema:       leaseSchema(),
		ProtoFile:         pf,
		Sentinels:         sentinelNames(),
		ControllerHeader:  controllerHeader,
		StoreSchema:       storeSchema(),
		SQLiteSchema:      sqlite.SchemaVersion,
	}, nil
}

// errKind names the class of a checkpoint error, which the test compares
// across versions: "version" (a format the reader does not know),
// "corrupt", or "other".
func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, checkpoint.ErrVersion):
		return "version"
	case errors.Is(err, checkpoint.ErrCorrupt):
		return "corrupt"
	}
	return "other"
}
