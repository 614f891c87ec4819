// Package checkpoint is the node agent's own record of what it has
// programmed: per pod, its VNI lease and the CXI services made for it on
// each NIC. It is what lets a restarted agent tell its own services from
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
	"maps"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/atomicfile"
)

// Version is the format this package writes. It reads it, version 2 (no
// journal, no sequence numbers) and version 1 (no claims either); an
// older agent refuses version 3 rather than read a snapshot that a
// journal it does not know may have overtaken.
const Version = 3

// Errors of [Load].
var (
	ErrCorrupt = errors.New("checkpoint corrupt")
	ErrVersion = errors.New("checkpoint version unsupported")
)

// State is everything the agent has programmed on this node.
type State struct {
	// Node is the node the state belongs to.
	Node string `json:"node"`
	// Pods by "namespace/name": the key the kubelet's PodResources API
	// gives (it carries no UIDs).
	Pods map[string]*Pod `json:"pods"`
	// Claims are the DRA front end's records, by claim UID.
	Claims map[string]*Claim `json:"claims,omitempty"`
}

// Pod is one pod's fabric state.
type Pod struct {
	// UID is the pod's UID where it was known; a pod of the same name and
	// another UID is a different pod.
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// VNI is the pod's primary VNI (SLINGSHOT_VNIS' first entry); zero
	// when the pod opted out of a VNI.
	VNI uint16 `json:"vni"`
	// Scope is whom the VNI belongs to: "job", "claim", "pod" or "none".
	Scope string `json:"scope"`
	// LeaseKey names the lease at the controller; Local is set for a
	// pod-scoped VNI from the node's own pool. Both are what the release
	// at pod exit needs.
	LeaseKey string `json:"leaseKey,omitempty"`
	Local    bool   `json:"local,omitempty"`
	// Netns is the network namespace inode that is the services' member,
	// or zero when a fallback UID/GID member was used.
	Netns uint32 `json:"netns,omitempty"`
	// Services the agent created for the pod, one per NIC.
	Services []Service `json:"services"`
	// DeviceIDs are the device-plugin IDs allocated to the pod's
	// containers, by container name.
	DeviceIDs map[string][]string `json:"deviceIDs"`
	// Created is when the first service was made.
	Created time.Time `json:"created"`
	// Exited is set when the pod was seen gone and cleanup began; the
	// entry stays until every service is destroyed and the VNI released.
	Exited *time.Time `json:"exited,omitempty"`
	// Released is set once the controller has been told the node no
	// longer holds the VNI.
	Released bool `json:"released,omitempty"`
	// Network is the pod's network request (its slingshot.hpe.com/network
	// annotation, unparsed) as the controller passed it on with the lease.
	Network string `json:"network,omitempty"`
	// CollEnv is the job's hardware-collectives environment
	// (engine.CollectivesEnv) as the lease brought it, for the pod's
	// containers; empty for none.
	CollEnv []string `json:"collEnv,omitempty"`
	// HSN is the hsn interface the agent put in the pod's namespace, from
	// the moment its address is allocated until it is removed and the
	// address released.
	HSN *HSNLink `json:"hsn,omitempty"`
	// Options are the service options the pod was admitted with; nil:
	// the node's defaults.
	Options *ServiceOptions `json:"options,omitempty"`
}

// HSNLink is a pod's interface on the high-speed network.
type HSNLink struct {
	// Name is the interface's name in the pod, Parent the host's hsn
	// netdev it is a child of, Mode "macvlan" or "ipvlan".
	Name   string `json:"name"`
	Parent string `json:"parent"`
	Mode   string `json:"mode"`
	// Address is the pod's address with the pool's prefix length.
	Address netip.Prefix `json:"address"`
	// Owner keys the address at the agent's allocator.
	Owner string `json:"owner"`
	// MTU of the interface; 0 kept the parent's.
	MTU int `json:"mtu,omitempty"`
}

// Service is one CXI service on one NIC.
type Service struct {
	NIC  string   `json:"nic"`
	ID   uint32   `json:"id"`
	VNIs []uint16 `json:"vnis"`
}

// New returns an empty state for node.
func New(node string) *State { return &State{Node: node, Pods: map[string]*Pod{}} }

// Clone returns a deep copy, so a snapshot can be saved or shown while the
// live state keeps changing.
func (s *State) Clone() *State {
	c := &State{Node: s.Node, Pods: make(map[string]*Pod, len(s.Pods))}
	for key, p := range s.Pods {
		cp := p.Clone()
		c.Pods[key] = &cp
	}
	if s.Claims != nil {
		c.Claims = make(map[string]*Claim, len(s.Claims))
		for uid, cl := range s.Claims {
			c.Claims[uid] = cl.Clone()
		}
	}
	return c
}

// Key returns the pod's key in [State.Pods].
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// PodKeys returns the keys of Pods in sorted order.
func (s *State) PodKeys() []string { return slices.Sorted(maps.Keys(s.Pods)) }

// envelope is the file format: the state's JSON, its checksum, and its
// sequence number, which orders the snapshot and the journal's entries.
type envelope struct {
	Version  int             `json:"version"`
	Seq      uint64          `json:"seq,omitempty"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// Marshal encodes the state in its versioned, checksummed envelope, with
// sequence number 0.
func Marshal(s *State) ([]byte, error) { return marshalSeq(s, 0) }

// marshalSeq encodes the state in an envelope numbered seq, on one line.
func marshalSeq(s *State, seq uint64) ([]byte, error) {
	data, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	sum := sha256.Sum256(data)
	return json.Marshal(envelope{Version: Version, Seq: seq, Checksum: hex.EncodeToString(sum[:]), Data: data})
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
	if env.Version < Version && env.Seq != 0 {
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
	s := &State{}
	if err := json.Unmarshal(env.Data, s); err != nil {
		return nil, env, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if s.Pods == nil {
		s.Pods = map[string]*Pod{}
	}
	for key, p := range s.Pods {
		if p == nil || p.Key() != key {
			return nil, env, fmt.Errorf("%w: pod entry %q does not match its key", ErrCorrupt, key)
		}
	}
	for uid, c := range s.Claims {
		if c == nil || c.UID != uid {
			return nil, env, fmt.Errorf("%w: claim entry %q does not match its UID", ErrCorrupt, uid)
		}
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

// Save writes the state to path atomically and durably, as the snapshot,
// and removes the journal beside it: the file then holds s alone. The
// agent saves through [Store].
func Save(path string, s *State) error {
	b, err := Marshal(s)
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
