package ipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/atomicfile"
)

// stateVersion is the state file's format; a newer one is refused rather
// than misread.
const stateVersion = 1

// record is the state file: what the node holds and what it handed out.
type record struct {
	Version     int           `json:"version"`
	Pools       []Pool        `json:"pools"`
	Slices      []sliceRecord `json:"slices"`
	Allocations []Allocation  `json:"allocations"`
}

// sliceRecord is a slice the node holds. Returning is set, and written,
// before the slice is given back, so that no address of it is handed out
// while the controller may already lease it to another node.
type sliceRecord struct {
	Slice
	Returning bool `json:"returning,omitempty"`
}

// Allocation is one address handed out.
type Allocation struct {
	// Owner keys the allocation: "cni/<container>/<ifname>" or
	// "pod/<uid>/<ifname>".
	Owner string `json:"owner"`
	// Network is the CNI network's name; empty for the agent's own hsn
	// interfaces, which CNI GC never touches.
	Network string     `json:"network,omitempty"`
	Pool    string     `json:"pool"`
	Address netip.Addr `json:"address"`
	// Pod is who the owner belongs to, for inspection.
	Pod   string    `json:"pod,omitempty"`
	Since time.Time `json:"since"`
}

// loadRecord reads the state file; a missing file is an empty record.
func loadRecord(path string) (record, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return record{Version: stateVersion}, nil
	}
	if err != nil {
		return record{}, fmt.Errorf("read ipam state: %w", err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return record{}, fmt.Errorf("ipam state %s is corrupt: %w", path, err)
	}
	if r.Version != stateVersion {
		return record{}, fmt.Errorf("ipam state %s has version %d, this agent reads %d", path, r.Version, stateVersion)
	}
	return r, nil
}

func saveRecord(path string, r record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode ipam state: %w", err)
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write ipam state: %w", err)
	}
	return nil
}
