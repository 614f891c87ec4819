package event

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestCatalogueDocumented: every reason is listed in the README's
// "Events" table (or a page under docs/), with its object and type, so
// that an operator reading `kubectl describe` can look it up.
func TestCatalogueDocumented(t *testing.T) {
	var docs strings.Builder
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs.Write(readme)
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	for _, info := range Catalogue() {
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(string(info.Reason)) + "` \\| " + string(info.Object) + " \\| " + info.Type + " \\|")
		if !row.MatchString(docs.String()) {
			t.Errorf("reason %s (%s, %s) is not in the README's Events table", info.Reason, info.Object, info.Type)
		}
	}
}

// TestCatalogueWellFormed: reasons are unique CamelCase words, each with a
// type, an object, an action and advice.
func TestCatalogueWellFormed(t *testing.T) {
	seen := map[Reason]bool{}
	word := regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,127}$`)
	for _, i := range Catalogue() {
		if seen[i.Reason] {
			t.Errorf("reason %s twice", i.Reason)
		}
		seen[i.Reason] = true
		if !word.MatchString(string(i.Reason)) {
			t.Errorf("reason %q is not one CamelCase word", i.Reason)
		}
		if i.Type != Normal && i.Type != Warning {
			t.Errorf("%s: type %q", i.Reason, i.Type)
		}
		if i.Object != KindPod && i.Object != KindNode {
			t.Errorf("%s: object %q", i.Reason, i.Object)
		}
		if i.Action == "" || i.Meaning == "" || i.Todo == "" {
			t.Errorf("%s: action, meaning and what to do are required", i.Reason)
		}
		if got, ok := Lookup(i.Reason); !ok || got.Reason != i.Reason {
			t.Errorf("Lookup(%s) = %v, %v", i.Reason, got, ok)
		}
	}
	if _, ok := Lookup("NoSuchReason"); ok {
		t.Error("Lookup found a reason the catalogue lacks")
	}
}

func TestMessage(t *testing.T) {
	info, _ := Lookup(BindRefused)
	tests := []struct {
		name, what string
		wantPrefix string
	}{
		{"cause first, with a full stop", "Container main: lease VNI: controller unreachable", "Container main: lease VNI: controller unreachable. The pod's CXI services"},
		{"no cause", "", "The pod's CXI services"},
		{"a long cause is cut, never the advice", strings.Repeat("é", 2000), "ééé"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Message(info, tt.what)
			if !strings.HasPrefix(m, tt.wantPrefix) {
				t.Errorf("message %q does not start with %q", m, tt.wantPrefix)
			}
			if len(m) > MaxMessage || !utf8.ValidString(m) {
				t.Errorf("message of %d bytes (valid UTF-8: %v), want at most %d", len(m), utf8.ValidString(m), MaxMessage)
			}
			if !strings.HasSuffix(m, info.Todo) {
				t.Errorf("message %q does not end with what to do", m)
			}
		})
	}
	ok, _ := Lookup(NRIConnected)
	if m := Message(ok, "Connected again"); strings.Contains(m, "What to do") {
		t.Errorf("a Normal event with nothing to do says what to do: %q", m)
	}
}

type counting struct{ n map[Reason]int }

func (c *counting) Record(_ Object, r Reason, _ string) { c.n[r]++ }

// TestLimited: a flood of one pod's event passes its burst, then one per
// PerKeyEvery; the agent's bucket bounds all objects together; what is
// refused is counted; buckets of many objects stay bounded in number.
func TestLimited(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	next := &counting{n: map[Reason]int{}}
	dropped := map[Reason]int{}
	lim := Limits{PerKeyEvery: 10 * time.Second, PerKeyBurst: 2, PerSecond: 1, Burst: 5, MaxKeys: 8}
	l := NewLimited(next, lim, clock, func(r Reason) { dropped[r]++ })

	pod := Pod("ns", "p", "u1")
	for range 100 {
		l.Record(pod, BindRefused, "x")
	}
	if next.n[BindRefused] != 2 || dropped[BindRefused] != 98 {
		t.Fatalf("one pod's flood: passed %d, dropped %d; want 2 and 98", next.n[BindRefused], dropped[BindRefused])
	}
	// Another reason of the same pod has its own bucket.
	l.Record(pod, CleanupStuck, "x")
	if next.n[CleanupStuck] != 1 {
		t.Fatalf("another reason of the pod: passed %d, want 1", next.n[CleanupStuck])
	}
	// Many pods at once: the agent's bucket (5, two spent, one spent) lets 2 more through.
	for i := range 50 {
		l.Record(Pod("ns", "p", string(rune('a'+i%26))+string(rune('a'+i/26))), BindRefused, "x")
	}
	if got := next.n[BindRefused]; got != 4 {
		t.Fatalf("a storm across pods: %d passed in all, want 4 (the agent's burst)", got)
	}
	if len(l.keys) > lim.MaxKeys {
		t.Fatalf("%d buckets kept, want at most %d", len(l.keys), lim.MaxKeys)
	}
	// Time refills the buckets: the first pod's next event passes.
	now = now.Add(lim.PerKeyEvery)
	l.Record(pod, BindRefused, "x")
	if got := next.n[BindRefused]; got != 5 {
		t.Fatalf("after PerKeyEvery: %d passed in all, want 5", got)
	}
}
