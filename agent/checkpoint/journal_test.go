package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// openStore opens a store at a fresh path and returns it with the path.
func openStore(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	st, err := Open(path, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	return st, path
}

func putPod(t *testing.T, st *Store, name string) {
	t.Helper()
	if err := st.Put(Holder{Kind: KindPod, Namespace: "ns", Name: name, DeviceIDs: map[string][]string{}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
}

func keysAt(t *testing.T, path string) []string {
	t.Helper()
	s, err := Load(path, "n1")
	if err != nil {
		t.Fatal(err)
	}
	return s.IDs()
}

// A save appends to the journal and leaves the snapshot alone; a restart
// finds the newest state.
func TestSavesGoToTheJournal(t *testing.T) {
	st, path := openStore(t)
	snap, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("Open wrote no snapshot: %v", err)
	}
	putPod(t, st, "a")
	putPod(t, st, "b")
	if again, _ := os.ReadFile(path); !bytes.Equal(again, snap) {
		t.Fatal("a save rewrote the snapshot; want it appended to the journal")
	}
	lines := strings.Count(readFile(t, path+journalSuffix), "\n")
	if lines != 2 {
		t.Fatalf("journal has %d lines after two saves, want 2", lines)
	}
	if got := keysAt(t, path); !reflect.DeepEqual(got, []string{"ns/a", "ns/b"}) {
		t.Fatalf("Load = %v", got)
	}
	// A restart folds the journal into the snapshot.
	if _, err := Open(path, "n1", 0); err != nil {
		t.Fatal(err)
	}
	if j := readFile(t, path+journalSuffix); j != "" {
		t.Fatalf("journal after a restart: %q, want empty", j)
	}
	if got := keysAt(t, path); !reflect.DeepEqual(got, []string{"ns/a", "ns/b"}) {
		t.Fatalf("Load after the fold = %v", got)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func appendTo(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

// A save a crash cut short left part of a line: it never returned, so it
// is dropped, and the next run starts clean from the save before it.
func TestTornJournalTailIsDropped(t *testing.T) {
	st, path := openStore(t)
	putPod(t, st, "a")
	full := readFile(t, path+journalSuffix)
	appendTo(t, path+journalSuffix, full[:len(full)/2])
	if got := keysAt(t, path); !reflect.DeepEqual(got, []string{"ns/a"}) {
		t.Fatalf("Load with a torn tail = %v, want [ns/a]", got)
	}
	again, err := Open(path, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	putPod(t, again, "b")
	if got := keysAt(t, path); !reflect.DeepEqual(got, []string{"ns/a", "ns/b"}) {
		t.Fatalf("Load after a save past the torn tail = %v", got)
	}
}

// A finished line that does not check out is damage, not a crash: Load
// refuses, as for a damaged snapshot.
func TestDamagedJournalEntryIsCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(journal string) string
		want   error
	}{
		{"flipped byte", func(j string) string { return strings.Replace(j, `"name":"a"`, `"name":"x"`, 1) }, ErrCorrupt},
		{"line cut, newline kept", func(j string) string { return j[:len(j)/2] + "\n" }, ErrCorrupt},
		{"entries out of order", func(j string) string {
			lines := strings.SplitAfter(j, "\n")
			return lines[1] + lines[0]
		}, ErrCorrupt},
		{"older version in the journal", func(j string) string {
			old, _ := json.Marshal(envelope{Version: 2, Checksum: "x", Data: json.RawMessage(`{}`)})
			return j + string(old) + "\n"
		}, ErrCorrupt},
		{"future version", func(j string) string {
			return strings.Replace(j, fmt.Sprintf(`"version":%d`, DefaultFormat), `"version":99`, 1)
		}, ErrVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, path := openStore(t)
			putPod(t, st, "a")
			putPod(t, st, "b")
			if err := os.WriteFile(path+journalSuffix, []byte(tc.damage(readFile(t, path+journalSuffix))), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, "n1")
			if !errors.Is(err, tc.want) {
				t.Fatalf("Load = %v, want %v", err, tc.want)
			}
			if _, err := Open(path, "n1", 0); !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
		})
	}
}

// Past compactAfter the journal is folded into the snapshot, so it stays
// bounded; nothing is lost across the folds.
func TestJournalIsFolded(t *testing.T) {
	st, path := openStore(t)
	big := strings.Repeat("x", 4<<10)
	n := 0
	for folded := false; !folded; n++ {
		if err := st.Put(Holder{Kind: KindPod, Namespace: "ns", Name: fmt.Sprintf("p%03d", n), Network: big, DeviceIDs: map[string][]string{}}); err != nil {
			t.Fatal(err)
		}
		if err := st.Save(); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(path + journalSuffix)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() > compactAfter+int64(n+1)*8<<10 {
			t.Fatalf("journal of %d bytes after %d saves: not folded", info.Size(), n+1)
		}
		folded = info.Size() == 0
		if n > 10_000 {
			t.Fatal("the journal was never folded")
		}
	}
	if got := len(keysAt(t, path)); got != n {
		t.Fatalf("%d pods after the fold, want %d", got, n)
	}
}

// A crash after a fold wrote the snapshot but before it emptied the
// journal leaves older entries there: the snapshot wins by its sequence
// number.
func TestSnapshotNewerThanJournalWins(t *testing.T) {
	st, path := openStore(t)
	putPod(t, st, "a")
	stale := readFile(t, path+journalSuffix)
	st.w.j.fold = true // the next save folds
	putPod(t, st, "b")
	if err := os.WriteFile(path+journalSuffix, []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := keysAt(t, path); !reflect.DeepEqual(got, []string{"ns/a", "ns/b"}) {
		t.Fatalf("Load = %v, want the snapshot's [ns/a ns/b]", got)
	}
}

// An agent of version 2 left a snapshot alone: it is read, and written
// anew in version 3 at once, so that the older agent, if it comes back,
// refuses it rather than miss the journal.
func TestVersion2SnapshotIsUpgraded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	data, err := encodeData(sample(), 2)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := json.Marshal(envelope{Version: 2, Checksum: sha256Hex(data), Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, v2, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, "node-1", 0); err != nil {
		t.Fatal(err)
	}
	if got, err := Load(path, "node-1"); err != nil || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("state read from version 2 = %+v, %v", got, err)
	}
	var env envelope
	if err := json.Unmarshal([]byte(readFile(t, path)), &env); err != nil || env.Version != DefaultFormat || env.Seq == 0 {
		t.Fatalf("snapshot after Open: version %d seq %d (%v), want version %d with a sequence number", env.Version, env.Seq, err, DefaultFormat)
	}
}

// A journal that cannot be written fails the save; once it can, the next
// save carries every change.
func TestFailedAppendFailsTheSave(t *testing.T) {
	st, path := openStore(t)
	putPod(t, st, "a")
	if err := os.Remove(path + journalSuffix); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path+journalSuffix, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(Holder{Kind: KindPod, Namespace: "ns", Name: "b", DeviceIDs: map[string][]string{}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(); err == nil {
		t.Fatal("Save with the journal's path taken by a directory succeeded")
	}
	if err := os.RemoveAll(path + journalSuffix); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	if got := keysAt(t, path); !reflect.DeepEqual(got, []string{"ns/a", "ns/b"}) {
		t.Fatalf("Load = %v", got)
	}
}

func FuzzReadJournal(f *testing.F) {
	line, _ := marshalSeq(sample(), Version, 7)
	f.Add(append(line, '\n'))
	f.Add(append(append(line, '\n'), line[:20]...))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "j")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, seq, good, err := readJournal(path)
		if err != nil {
			return
		}
		if good > int64(len(b)) || (s == nil) != (seq == 0) {
			t.Fatalf("readJournal = state %v, seq %d, good %d of %d", s != nil, seq, good, len(b))
		}
	})
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
