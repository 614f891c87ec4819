package controller

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// claimLog records what the Allocator tells its ClaimObserver.
type claimLog struct {
	mu     sync.Mutex
	events []string
}

func (c *claimLog) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, s)
}

func (c *claimLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.events
	c.events = nil
	return e
}

func (c *claimLog) Leased(r ClaimRef, vni uint16) {
	c.add("leased " + r.Name + " " + strconv.Itoa(int(vni)))
}
func (c *claimLog) Failed(r ClaimRef, msg string) { c.add("failed " + r.Name + ": " + msg) }
func (c *claimLog) Forget(r ClaimRef)             { c.add("forget " + r.Name) }
func (c *claimLog) Loaded(claims []ClaimRef) {
	var names []string
	for _, r := range claims {
		names = append(names, r.Namespace+"/"+r.Name)
	}
	slices.Sort(names)
	c.add("loaded " + strings.Join(names, ","))
}

func claimOwner(c ClaimRef) store.Owner {
	return store.Owner{APIVersion: ClaimAPIVersion, Kind: ClaimKind, Namespace: c.Namespace, Name: c.Name}
}

// TestClaimObserver checks what the observer hears, step by step: a
// claim's lease once committed (and on every acquire, which the observer
// answers from memory), a claim that cannot get a VNI, nothing for a job,
// every claim lease at a load, and the claim's end.
func TestClaimObserver(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	res := newFakeResolver()
	res.setExists("team", "ring", true)
	res.setExists("team", "ring2", true)
	res.addPod("team", "a", nil, "claim:ring")
	res.addPod("team", "b", nil, "claim:ring")
	res.addPod("team", "c", nil, "claim:ring2")
	res.addPod("team", "j", job("team", "train"), "")
	obs := &claimLog{}
	cfg := Config{VNIRange: vnialloc.Range{Min: 2000, Max: 2010}, MaxLeasesPerNamespace: 2, Claims: obs}
	svc, stop := start(t, path, res, cfg)
	if got := obs.take(); !slices.Equal(got, []string{"loaded "}) {
		t.Fatalf("at start: %q, want an empty load", got)
	}
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"the first acquire naming the claim", func() error {
			_, err := svc.AcquireJobVNI(ctx, PodRef{Namespace: "team", Name: "a"}, "n1")
			return err
		}, []string{"leased ring 2000"}},
		{"a second node", func() error {
			_, err := svc.AcquireJobVNI(ctx, PodRef{Namespace: "team", Name: "b"}, "n2")
			return err
		}, []string{"leased ring 2000"}},
		{"a job tells nothing", func() error {
			_, err := svc.AcquireJobVNI(ctx, PodRef{Namespace: "team", Name: "j"}, "n1")
			return err
		}, nil},
		{"the namespace is full", func() error {
			if _, err := svc.AcquireJobVNI(ctx, PodRef{Namespace: "team", Name: "c"}, "n1"); err == nil {
				t.Error("acquire past the namespace cap succeeded")
			}
			return nil
		}, []string{"failed ring2: no VNI: namespace team holds 2 VNI leases, its cap (--max-leases-per-namespace)"}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := obs.take(); !slices.Equal(got, s.want) {
			t.Errorf("%s: observer heard %q, want %q", s.name, got, s.want)
		}
	}
	if vni, leased, err := svc.ClaimVNI(ClaimRef{Namespace: "team", Name: "ring"}); err != nil || !leased || vni != 2000 {
		t.Errorf("ClaimVNI(ring) = %d, %v, %v; want 2000, true", vni, leased, err)
	}
	if _, leased, err := svc.ClaimVNI(ClaimRef{Namespace: "team", Name: "ring2"}); err != nil || leased {
		t.Errorf("ClaimVNI(ring2) = %v, %v; want no lease", leased, err)
	}

	stop()
	svc, _ = start(t, path, res, cfg)
	if got := obs.take(); !slices.Equal(got, []string{"loaded team/ring"}) {
		t.Errorf("after a restart: %q, want the claim's lease", got)
	}
	for _, n := range []string{"n1", "n2"} {
		if _, err := svc.ReleaseJobVNI(ctx, "claim/team/ring", n); err != nil {
			t.Fatal(err)
		}
	}
	claim := ClaimRef{Namespace: "team", Name: "ring"}
	if _, done, err := svc.FinalizeOwner(ctx, claimOwner(claim), true); err != nil || !done {
		t.Fatalf("finalize the claim: %v, %v", done, err)
	}
	if got := obs.take(); !slices.Equal(got, []string{"forget ring"}) {
		t.Errorf("after the claim's end: %q, want it forgotten", got)
	}
	if _, leased, err := svc.ClaimVNI(claim); err != nil || leased {
		t.Errorf("ClaimVNI after the end = %v, %v; want no lease", leased, err)
	}
}
