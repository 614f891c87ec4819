package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sample() *State {
	s := New("node-1")
	exited := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	s.Holders["ns/a-0"] = &Holder{Kind: KindPod,
		UID: "uid-a", Namespace: "ns", Name: "a-0", VNI: 1024, Scope: "job", Netns: 4026532000,
		Services:  []Service{{NIC: "cxi0", ID: 2, VNIs: []uint16{1024}, Netns: 4026532000}, {NIC: "cxi1", ID: 2, VNIs: []uint16{1024}, Netns: 4026532000}},
		DeviceIDs: map[string][]string{"main": {"0000:21:00.0", "0000:41:00.0"}},
		Created:   time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC),
	}
	s.Holders["ns/b"] = &Holder{Kind: KindPod, UID: "uid-b", Namespace: "ns", Name: "b", VNI: 1025, Scope: "pod", Exited: &exited,
		DeviceIDs: map[string][]string{}}
	return s
}

func TestSaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	want := sample()
	if err := Save(path, want, DefaultFormat); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if uids := got.IDs(); !reflect.DeepEqual(uids, []string{"ns/a-0", "ns/b"}) {
		t.Fatalf("PodUIDs = %v", uids)
	}
}

func TestLoadMissingIsEmpty(t *testing.T) {
	s, err := Load(filepath.Join(t.TempDir(), "none.json"), "n")
	if err != nil || s.Node != "n" || len(s.Holders) != 0 {
		t.Fatalf("Load missing = %+v, %v", s, err)
	}
}

func TestLoadRejectsDamage(t *testing.T) {
	good, err := Marshal(sample(), DefaultFormat)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data string
		want error
	}{
		{"truncated", string(good[:len(good)/2]), ErrCorrupt},
		{"flipped byte", strings.Replace(string(good), "1024", "1023", 1), ErrCorrupt},
		{"future version", strings.Replace(string(good), fmt.Sprintf(`"version":%d`, DefaultFormat), `"version":9`, 1), ErrVersion},
		{"not json", "hello", ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.json")
			if err := os.WriteFile(path, []byte(tt.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, "n")
			if !errors.Is(err, tt.want) {
				t.Fatalf("Load = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}

func TestCloneIsDeep(t *testing.T) {
	s := sample()
	c := s.Clone()
	c.Holders["ns/a-0"].Services[0].VNIs[0] = 9
	c.Holders["ns/a-0"].DeviceIDs["main"][0] = "x"
	*c.Holders["ns/b"].Exited = time.Time{}
	if s.Holders["ns/a-0"].Services[0].VNIs[0] != 1024 || s.Holders["ns/a-0"].DeviceIDs["main"][0] != "0000:21:00.0" || s.Holders["ns/b"].Exited.IsZero() {
		t.Fatal("Clone shares memory with the original")
	}
}

func FuzzUnmarshal(f *testing.F) {
	good, _ := Marshal(sample(), DefaultFormat)
	f.Add(good)
	f.Add([]byte(`{"version":1,"checksum":"","data":null}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Unmarshal(b)
		if err != nil {
			return
		}
		// Whatever decodes must encode and decode to the same state in
		// the newest format, which keeps everything.
		again, err := Marshal(s, Version)
		if err != nil {
			t.Fatalf("Marshal of a decoded state: %v", err)
		}
		s2, err := Unmarshal(again)
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("re-decode differs: %v", err)
		}
	})
}

func BenchmarkSave100Pods(b *testing.B) {
	s := New("n")
	for i := range 100 {
		name := "pod-" + string(rune('a'+i%26)) + strings.Repeat("x", i)
		s.Holders["ns/"+name] = &Holder{Kind: KindPod, UID: name, Namespace: "ns", Name: name, VNI: uint16(1024 + i), Scope: "job",
			Services: []Service{{NIC: "cxi0", ID: uint32(i + 2), VNIs: []uint16{uint16(1024 + i)}}}}
	}
	path := filepath.Join(b.TempDir(), "c.json")
	for b.Loop() {
		if err := Save(path, s, DefaultFormat); err != nil {
			b.Fatal(err)
		}
	}
}

// A claim's service is a service of one record, pod or claim, whichever
// front end made it; a version 1 file (pods only) still loads.
func TestClaimsShareTheRules(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "c.json"), "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	pod := Holder{Kind: KindPod, Namespace: "ns", Name: "a", VNI: 1024, Services: []Service{{NIC: "cxi0", ID: 5, VNIs: []uint16{1024}}}, DeviceIDs: map[string][]string{}}
	if err := st.Put(pod); err != nil {
		t.Fatal(err)
	}
	c := Holder{Kind: KindClaim, UID: "u1", Namespace: "ns", Name: "c1", VNI: 2000, Services: []Service{{NIC: "cxi0", ID: 5, VNIs: []uint16{2000}}}}
	if err := st.Put(c); !errors.Is(err, ErrInvariant) {
		t.Fatalf("claim naming a pod's service: %v, want ErrInvariant", err)
	}
	c.Services[0].ID = 6
	if err := st.Put(c); err != nil {
		t.Fatal(err)
	}
	pod.Name, pod.Services[0].ID = "b", 6
	if err := st.Put(pod); !errors.Is(err, ErrInvariant) {
		t.Fatalf("pod naming a claim's service: %v, want ErrInvariant", err)
	}
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(st.Path(), "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := again.Get(ClaimID("u1")); !ok || got.Services[0].ID != 6 || got.VNI != 2000 {
		t.Fatalf("claim after a reload: %+v %v", got, ok)
	}

	v1 := `{"version":1,"checksum":"%s","data":%s}`
	data := `{"node":"n1","pods":{}}`
	sum := sha256.Sum256([]byte(data))
	path := filepath.Join(t.TempDir(), "v1.json")
	if err := os.WriteFile(path, fmt.Appendf(nil, v1, hex.EncodeToString(sum[:]), data), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, "n1", 0); err != nil {
		t.Fatalf("a version 1 checkpoint: %v", err)
	}
}

// Concurrent saves share writes; every change a save returned for is on
// disk, none lost to a write that carried an older snapshot.
func TestConcurrentSavesLoseNothing(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "c.json"), "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	errs := make(chan error, n)
	for i := range n {
		go func() {
			p := Holder{Kind: KindPod, Namespace: "ns", Name: fmt.Sprintf("p%d", i), DeviceIDs: map[string][]string{}}
			if err := st.Put(p); err != nil {
				errs <- err
				return
			}
			errs <- st.Save()
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	again, err := Open(st.Path(), "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(again.IDs(KindPod)); got != n {
		t.Fatalf("%d pods on disk, want %d", got, n)
	}
}

// A service ID the driver hands out again is dropped from the record that
// still names it (a destroyed service whose record was not yet updated),
// pod or claim, so that the new service can be recorded.
func TestForgetReused(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "c.json"), "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	old := Holder{Kind: KindPod, Namespace: "ns", Name: "old", Services: []Service{{NIC: "cxi0", ID: 5}, {NIC: "cxi1", ID: 5}}, DeviceIDs: map[string][]string{}}
	if err := st.Put(old); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(Holder{Kind: KindClaim, UID: "u", Namespace: "ns", Name: "c", Services: []Service{{NIC: "cxi0", ID: 6}}}); err != nil {
		t.Fatal(err)
	}
	if got := st.ForgetReused("cxi0", 5); len(got) != 1 || got[0] != "ns/old" {
		t.Fatalf("forgot in %v, want ns/old", got)
	}
	if got := st.ForgetReused("cxi0", 6); len(got) != 1 || got[0] != "claim:u" {
		t.Fatalf("forgot in %v, want claim:u", got)
	}
	p, _ := st.Get("ns/old")
	if len(p.Services) != 1 || p.Services[0].NIC != "cxi1" {
		t.Fatalf("ns/old keeps %v, want cxi1's service only", p.Services)
	}
	if err := st.Put(Holder{Kind: KindPod, Namespace: "ns", Name: "new", Services: []Service{{NIC: "cxi0", ID: 5}}, DeviceIDs: map[string][]string{}}); err != nil {
		t.Fatalf("recording the reused ID: %v", err)
	}
}
