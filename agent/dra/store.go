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

// The claims' records are the agent's one durable record, its checkpoint
// (agent/checkpoint): one file, one writer, one set of rules, whichever
// front end made a service.
type (
	// Record is what the agent did for one claim.
	Record = checkpoint.Claim
	// PodRef names a pod that a claim is reserved for.
	PodRef = checkpoint.ClaimPod
	// Result is one allocated device of the claim.
	Result = checkpoint.ClaimResult
	// Service is a CXI service made for a claim on one NIC.
	Service = checkpoint.ClaimService
)

// store is the Manager's view of the checkpoint: the claims.
type store struct{ st *checkpoint.Store }

func (s store) get(uid string) (*Record, bool) { return s.st.Claim(uid) }
func (s store) all() []*Record                 { return s.st.Claims() }
func (s store) put(r *Record) error            { return s.st.PutClaim(r) }
func (s store) remove(uid string)              { s.st.DeleteClaim(uid) }
func (s store) save() error                    { return s.st.Save() }

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
		Version int               `json:"version"`
		Node    string            `json:"node"`
		Claims  map[string]Record `json:"claims"`
	}
	if err := json.Unmarshal(data, &legacy); err != nil {
		return 0, fmt.Errorf("%s: %w: %w", path, checkpoint.ErrCorrupt, err)
	}
	if legacy.Version != 1 || legacy.Node != node {
		return 0, fmt.Errorf("%s: %w: version %d of node %q, want version 1 of %q", path, checkpoint.ErrCorrupt, legacy.Version, legacy.Node, node)
	}
	for uid, r := range legacy.Claims {
		if r.UID != uid {
			return 0, fmt.Errorf("%s: %w: record %q is malformed", path, checkpoint.ErrCorrupt, uid)
		}
		if err := st.PutClaim(&r); err != nil {
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
