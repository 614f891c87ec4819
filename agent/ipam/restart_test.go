package ipam_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/ipam/ipamtest"
)

// TestRestartInTheMiddleOfAddsHandsNothingOutTwice crashes the agent at
// random moments of concurrent ADDs: what a crash leaves is the state
// file as it is at that moment. Every address answered before it must be
// in that file, and an agent started from it must hand out none of them
// again.
func TestRestartInTheMiddleOfAddsHandsNothingOutTwice(t *testing.T) {
	ctl := ipamtest.NewController(hsn0)
	dir := t.TempDir()
	n := newNode(t, ctl, "n1", dir, 8)
	for round := range 5 {
		// The crash comes once this many ADDs were answered, at a
		// different moment each round, while the others are in flight.
		crashAt := 20 + round*12
		var (
			mu       sync.Mutex
			answered = map[string]netip.Addr{}
			before   map[string]netip.Addr // the answers given at the crash
			data     []byte                // the state file at the crash
			wg       sync.WaitGroup
		)
		for w := range 3 {
			wg.Go(func() {
				for i := range 30 {
					owner := fmt.Sprintf("cni/r%d-w%d-%d/net1", round, w, i)
					_, pfx, err := n.a.Allocate(context.Background(), ipam.Request{Owner: owner, Pool: "hsn0"})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					answered[owner] = pfx.Addr()
					if len(answered) == crashAt {
						// The crash: the answers given so far, then the
						// file as it is now, other ADDs still running.
						before = maps.Clone(answered)
						var rerr error
						if data, rerr = os.ReadFile(n.state); rerr != nil {
							t.Error(rerr)
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if before == nil {
			t.Fatalf("round %d: %d ADDs answered, never %d", round, len(answered), crashAt)
		}
		// Start a new agent from the file as the crash left it.
		if err := os.WriteFile(n.state, data, 0o600); err != nil {
			t.Fatal(err)
		}
		n = newNode(t, ctl, "n1", dir, 8)
		seen := map[netip.Addr]string{}
		for _, al := range n.a.Inspect().Allocations {
			seen[al.Address] = al.Owner
		}
		for o, a := range before {
			if seen[a] != o {
				t.Fatalf("round %d: %s was answered %s before the crash, but the restarted agent has it as %q", round, o, a, seen[a])
			}
		}
		for i := range 30 {
			pfx := n.alloc(t, fmt.Sprintf("cni/after%d-%d/net1", round, i))
			if o, dup := seen[pfx.Addr()]; dup {
				t.Fatalf("round %d: restarted agent handed out %s, which %s holds", round, pfx.Addr(), o)
			}
			seen[pfx.Addr()] = "new"
		}
	}
}

func TestStateFileIsCheckedOnLoad(t *testing.T) {
	tests := []struct{ name, body, errHas string }{
		{"corrupt", `{"version":1,`, "corrupt"},
		{"newer", `{"version":2}`, "has version 2"},
		{"slice of no pool", `{"version":1,"slices":[{"pool":"hsn0","index":3,"prefix":"10.150.3.0/24"}]}`, "does not belong"},
		{"address twice", `{"version":1,"pools":[{"name":"hsn0","prefix":"10.150.0.0/16","sliceBits":24}],
			"allocations":[{"owner":"a","pool":"hsn0","address":"10.150.0.5"},{"owner":"b","pool":"hsn0","address":"10.150.0.5"}]}`, "recorded for both"},
		{"address outside", `{"version":1,"pools":[{"name":"hsn0","prefix":"10.150.0.0/16","sliceBits":24}],
			"allocations":[{"owner":"a","pool":"hsn0","address":"10.151.0.5"}]}`, "outside a recorded pool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ipam.json")
			if err := os.WriteFile(path, []byte(tt.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := ipam.New(ipam.Options{StatePath: path, Slicer: ipamtest.NewController().Node("n")})
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("New = %v, want an error containing %q", err, tt.errHas)
			}
		})
	}
}

// TestInvariantsUnderInterleavings drives two nodes on one controller
// through random allocations, releases, upkeep passes with failed and
// lost answers, and restarts, and checks after every step that no
// address is held twice across the nodes, that every address lies in a
// slice the controller leases to its node, and that every slice a node
// may allocate from is leased to it: what keeps two nodes from ever
// handing out one address.
func TestInvariantsUnderInterleavings(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			ctl := ipamtest.NewController(tiny)
			dir := t.TempDir()
			nodes := []*node{newNode(t, ctl, "n0", dir, 2), newNode(t, ctl, "n1", dir, 2)}
			live := []map[string]bool{{}, {}}
			for step := range 300 {
				k := rng.IntN(2)
				n := nodes[k]
				// Phases of growth and of shrinking, so that slices fill,
				// empty and are given back.
				op := rng.IntN(10)
				if (step/50)%2 == 1 && op < 4 {
					op = 6 - op%3
				}
				switch {
				case op < 4:
					owner := fmt.Sprintf("cni/s%d/net1", step)
					if _, _, err := n.a.Allocate(context.Background(), ipam.Request{Owner: owner, Pool: "tiny"}); err == nil {
						live[k][owner] = true
					}
				case op < 7:
					for o := range live[k] {
						if _, err := n.a.Release(o); err == nil {
							delete(live[k], o)
						}
						break
					}
				case op == 7:
					ctl.LoseNext(1)
					ctl.FailNext(rng.IntN(2))
					ipam.Upkeep(n.a, context.Background())
					ctl.LoseNext(0)
					ctl.FailNext(0)
				case op == 8:
					ipam.Upkeep(n.a, context.Background())
				default:
					nodes[k] = newNode(t, ctl, fmt.Sprintf("n%d", k), dir, 2)
				}
				checkNodes(t, step, ctl, nodes, live)
			}
		})
	}
}

func checkNodes(t *testing.T, step int, ctl *ipamtest.Controller, nodes []*node, live []map[string]bool) {
	t.Helper()
	owner := map[netip.Addr]string{}
	for k, n := range nodes {
		name := fmt.Sprintf("n%d", k)
		got := map[string]bool{}
		for _, al := range n.a.Inspect().Allocations {
			got[al.Owner] = true
			if o, dup := owner[al.Address]; dup {
				t.Fatalf("step %d: %s held by %s and by %s of %s", step, al.Address, o, al.Owner, name)
			}
			owner[al.Address] = name + ":" + al.Owner
			i, _ := tiny.SliceIndex(al.Address)
			if h := ctl.Holder("tiny", i); h != name {
				t.Fatalf("step %d: %s of %s lies in slice %d, which the controller leases to %q", step, al.Address, name, i, h)
			}
		}
		for _, r := range n.a.Reports() {
			if h := ctl.Holder("tiny", r.Index); r.Open && h != name {
				t.Fatalf("step %d: %s allocates from slice %d, which the controller leases to %q", step, name, r.Index, h)
			}
		}
		for o := range live[k] {
			if !got[o] {
				t.Fatalf("step %d: %s lost %s's address", step, name, o)
			}
		}
	}
}
