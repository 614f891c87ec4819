package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
)

// A claim's record is the engine's one holder record (agent/checkpoint):
// one file, one writer, one set of rules, whichever front end made a
// service.
type (
	// Record is what the agent did for one claim.
	Record = checkpoint.Holder
	// PodRef names a pod that a claim is reserved for.
	PodRef = checkpoint.ClaimPod
	// Result is one allocated device of the claim.
	Result = checkpoint.ClaimResult
	// Service is a CXI service made for a claim on one NIC.
	Service = checkpoint.Service
)

// LegacyStoreName is the file the claims were kept in before they joined
// the checkpoint.
const LegacyStoreName = "claims.json"

// MigrateLegacy moves the claims of a legacy claims.json in stateDir into
// st, saves st, and renames the file aside (claims.json.migrated), so
// that nothing an older agent recorded is lost. It returns how many
// claims moved; with no legacy file, none. A legacy file that is damaged
// or names another node is an error: never an empty state, which would
// orphan every service.
func MigrateLegacy(stateDir, node string, st *checkpoint.Store) (int, error) {
	path := filepath.Join(stateDir, LegacyStoreName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	var legacy struct {
		Version int                        `json:"version"`
		Node    string                     `json:"node"`
		Claims  map[string]json.RawMessage `json:"claims"`
	}
	if err := json.Unmarshal(data, &legacy); err != nil {
		return 0, fmt.Errorf("%s: %w: %w", path, checkpoint.ErrCorrupt, err)
	}
	if legacy.Version != 1 || legacy.Node != node {
		return 0, fmt.Errorf("%s: %w: version %d of node %q, want version 1 of %q", path, checkpoint.ErrCorrupt, legacy.Version, legacy.Node, node)
	}
	for uid, raw := range legacy.Claims {
		r, err := checkpoint.LegacyClaim(raw)
		if err != nil || r.UID != uid {
			return 0, fmt.Errorf("%s: %w: record %q is malformed", path, checkpoint.ErrCorrupt, uid)
		}
		if err := st.Put(r); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := st.Save(); err != nil {
		return 0, err
	}
	if err := os.Rename(path, path+".migrated"); err != nil {
		return 0, fmt.Errorf("set %s aside after migrating it: %w", path, err)
	}
	return len(legacy.Claims), nil
}
