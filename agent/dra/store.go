package dra

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/atomicfile"
)

// StoreName is the claims' checkpoint file in the agent's state directory.
const StoreName = "claims.json"

const storeVersion = 1

// Errors of the store.
var (
	ErrCorrupt = errors.New("claims checkpoint corrupt")
	// ErrInvariant is a change the store refuses: it would record one
	// CXI service for two claims.
	ErrInvariant = errors.New("claims checkpoint invariant")
)

// PodRef names a pod that a claim is reserved for.
type PodRef struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Result is one allocated device of the claim, as Prepare answers it.
type Result struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
}

// Service is a CXI service made for a claim on one NIC.
type Service struct {
	NIC string `json:"nic"`
	ID  uint32 `json:"id"`
	// Netns is the namespace inode the service admits; 0 while unbound.
	Netns uint32 `json:"netns,omitempty"`
}

// Record is what the agent did for one claim.
type Record struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods are the pods the claim was reserved for at Prepare.
	Pods   []PodRef    `json:"pods,omitempty"`
	Config ClaimConfig `json:"config"`
	// Results are this driver's devices of the claim, in allocation order.
	Results []Result `json:"results"`
	// The lease: LeaseKey names it at the controller, Local marks a
	// pod-scoped VNI of the node's own pool, Released that the node's hold
	// was given up. VNI 0: the claim opted out (vni: none).
	LeaseKey string `json:"leaseKey,omitempty"`
	VNI      uint16 `json:"vni"`
	Scope    string `json:"scope,omitempty"`
	Local    bool   `json:"local,omitempty"`
	Released bool   `json:"released,omitempty"`
	// Services are the claim's services, one per NIC it was allocated.
	Services []Service `json:"services,omitempty"`
	// BoundPod is the UID of the pod whose namespace the services admit,
	// BoundNetns the path the runtime named that namespace by, which a
	// restarted agent opens to hold it again.
	BoundPod   string `json:"boundPod,omitempty"`
	BoundNetns string `json:"boundNetns,omitempty"`
	// Prepared is set once the services and the CDI spec are complete.
	Prepared bool `json:"prepared,omitempty"`
	// Unpreparing is set when Unprepare began; nothing binds it any more.
	Unpreparing bool      `json:"unpreparing,omitempty"`
	Created     time.Time `json:"created"`
}

func (r *Record) clone() *Record {
	c := *r
	c.Pods = slices.Clone(r.Pods)
	c.Results = slices.Clone(r.Results)
	c.Services = slices.Clone(r.Services)
	return &c
}

// Key is the claim's "namespace/name".
func (r *Record) Key() string { return r.Namespace + "/" + r.Name }

// reservedFor reports whether the claim was reserved for pod uid.
func (r *Record) reservedFor(uid string) bool {
	return r.BoundPod == uid || slices.ContainsFunc(r.Pods, func(p PodRef) bool { return p.UID == uid })
}

type envelope struct {
	Version  int                `json:"version"`
	Node     string             `json:"node"`
	Claims   map[string]*Record `json:"claims"`
	Checksum string             `json:"checksum"`
}

// store keeps the records in memory and on disk. It is safe for
// concurrent use; a save writes the newest state, once.
type store struct {
	path string
	node string

	mu     sync.Mutex // guards claims and gen
	claims map[string]*Record
	gen    uint64

	wmu     sync.Mutex // orders writes
	written uint64
}

// openStore loads path, or starts empty where there is no file. A file
// that fails its checksum, names another node or has another version is
// an error: never an empty state, which would orphan every service.
func openStore(path, node string) (*store, error) {
	s := &store{path: path, node: node, claims: map[string]*Record{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	if env.Version != storeVersion {
		return nil, fmt.Errorf("%w: %s has version %d, want %d", ErrCorrupt, path, env.Version, storeVersion)
	}
	if sum, err := checksum(env); err != nil || sum != env.Checksum {
		return nil, fmt.Errorf("%w: %s fails its checksum", ErrCorrupt, path)
	}
	if env.Node != node {
		return nil, fmt.Errorf("%w: %s belongs to node %q, not %q", ErrCorrupt, path, env.Node, node)
	}
	for uid, r := range env.Claims {
		if r == nil || r.UID != uid {
			return nil, fmt.Errorf("%w: %s: record %q is malformed", ErrCorrupt, path, uid)
		}
		s.claims[uid] = r
	}
	return s, nil
}

func checksum(env envelope) (string, error) {
	env.Checksum = ""
	b, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// get returns a copy of the record of claim uid.
func (s *store) get(uid string) (*Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.claims[uid]
	if !ok {
		return nil, false
	}
	return r.clone(), true
}

// all returns copies of every record, by UID order.
func (s *store) all() []*Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Record, 0, len(s.claims))
	for _, uid := range slices.Sorted(maps.Keys(s.claims)) {
		out = append(out, s.claims[uid].clone())
	}
	return out
}

// put records r, refusing a service already recorded for another claim.
func (s *store) put(r *Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, o := range s.claims {
		if uid == r.UID {
			continue
		}
		for _, a := range r.Services {
			if slices.ContainsFunc(o.Services, func(b Service) bool { return a.NIC == b.NIC && a.ID == b.ID }) {
				return fmt.Errorf("%w: service %d on %s is recorded for claim %s already", ErrInvariant, a.ID, a.NIC, o.Key())
			}
		}
	}
	s.claims[r.UID] = r.clone()
	s.gen++
	return nil
}

// remove drops the record of claim uid.
func (s *store) remove(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, uid)
	s.gen++
}

// holders counts the records that hold lease key, but the one of except.
func (s *store) holders(key, except string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for uid, r := range s.claims {
		if uid != except && r.LeaseKey == key && !r.Released {
			n++
		}
	}
	return n
}

// save writes the newest state durably, unless a newer one is already on
// disk.
func (s *store) save() error {
	s.mu.Lock()
	gen := s.gen
	env := envelope{Version: storeVersion, Node: s.node, Claims: map[string]*Record{}}
	for uid, r := range s.claims {
		env.Claims[uid] = r.clone()
	}
	s.mu.Unlock()

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if gen <= s.written && s.written != 0 {
		return nil
	}
	sum, err := checksum(env)
	if err != nil {
		return fmt.Errorf("save claims: %w", err)
	}
	env.Checksum = sum
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(env); err != nil {
		return fmt.Errorf("save claims: %w", err)
	}
	if err := atomicfile.WriteFile(s.path, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("save claims: %w", err)
	}
	s.written = gen
	return nil
}
