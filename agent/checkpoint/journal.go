package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/slingshot-k8s/slingshot/internal/atomicfile"
)

// journalSuffix names the journal beside the snapshot.
const journalSuffix = ".journal"

// JournalPath is the path of the journal beside the snapshot at path.
func JournalPath(path string) string { return path + journalSuffix }

// compactAfter is the journal's length past which a save folds it into
// the snapshot: a few hundred saves of a busy node's state, read once at
// start.
const compactAfter = 1 << 20

// readJournal returns the newest state in the journal at path, its
// sequence number and the length of the journal's finished lines; a nil
// state when the journal is missing or empty. Every finished line must be
// a whole, valid entry (ErrCorrupt otherwise); the bytes after the last
// newline are a save a crash interrupted, which never returned: they are
// ignored.
func readJournal(path string) (*State, uint64, int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, 0, nil
	}
	if err != nil {
		return nil, 0, 0, fmt.Errorf("read checkpoint journal: %w", err)
	}
	good := bytes.LastIndexByte(b, '\n') + 1
	var (
		newest *State
		seq    uint64
	)
	for line := range bytes.Lines(b[:good]) {
		// Checking every entry, not just the last, tells damage from a
		// crash: only the unfinished tail may be bad.
		s, env, err := unmarshalEnvelope(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			return nil, 0, 0, fmt.Errorf("%s: %w", path, err)
		}
		if env.Version < journalFormat || env.Seq <= seq {
			return nil, 0, 0, fmt.Errorf("%s: %w: entry %d (version %d) after entry %d", path, ErrCorrupt, env.Seq, env.Version, seq)
		}
		newest, seq = s, env.Seq
	}
	return newest, seq, int64(good), nil
}

// journal appends to the checkpoint's journal and folds it into the
// snapshot. Its owner serialises the calls (writer.mu).
type journal struct {
	path string // the snapshot's; the journal is path + journalSuffix
	// format is the version written.
	format int
	seq    uint64 // of the newest entry written
	size   int64  // of the journal's finished lines
	// fold is set when the journal must be folded before the next entry:
	// an append failed part-way, or the journal is long enough.
	fold bool
}

// openJournal folds the journal left by the last run into a fresh
// snapshot, so that a run starts with an empty journal and the snapshot
// is written in this version (an older agent then refuses it rather than
// miss the journal).
func openJournal(path string, st *State, format int, seq uint64) (*journal, error) {
	if format < journalFormat || format > Version {
		return nil, fmt.Errorf("%w: this agent writes versions %d to %d, not %d", ErrVersion, journalFormat, Version, format)
	}
	j := &journal{path: path, format: format, seq: seq}
	if err := j.compact(st); err != nil {
		return nil, err
	}
	return j, nil
}

// write makes st durable as the next entry: appended to the journal with
// one fdatasync, or, when the journal is due for folding, as the
// snapshot.
func (j *journal) write(st *State) error {
	if j.fold || j.size >= compactAfter {
		return j.compact(st)
	}
	line, err := marshalSeq(st, j.format, j.seq+1)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	f, err := os.OpenFile(j.path+journalSuffix, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open checkpoint journal: %w", err)
	}
	_, werr := f.Write(line)
	if werr == nil {
		werr = unix.Fdatasync(int(f.Fd()))
	}
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		// A partial line may be on disk: the next save starts afresh
		// from a snapshot rather than append after it.
		j.fold = true
		return fmt.Errorf("append to checkpoint journal: %w", err)
	}
	j.seq++
	j.size += int64(len(line))
	return nil
}

// compact writes st as the snapshot and empties the journal. A crash
// between the two leaves journal entries older than the snapshot, which
// Load skips by their sequence numbers.
func (j *journal) compact(st *State) error {
	b, err := marshalSeq(st, j.format, j.seq+1)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(j.path, b, 0o600); err != nil {
		j.fold = true
		return err
	}
	j.seq++
	if err := os.Truncate(j.path+journalSuffix, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// The snapshot holds st, but a journal that cannot be emptied may
		// not be readable at the next start either: say so now.
		j.fold = true
		return fmt.Errorf("empty checkpoint journal: %w", err)
	}
	j.fold, j.size = false, 0
	return nil
}
