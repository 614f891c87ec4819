package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for i, content := range []string{"first", "second, longer content", "3", "fourth"} {
		write := WriteFile
		if i%2 == 1 {
			write = Replace
		}
		if err := write(p, []byte(content), 0o600); err != nil {
			t.Fatalf("WriteFile: %v", err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, %v; want 0600", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (no temp left)", len(entries))
	}
}

func TestWriteFileMissingDir(t *testing.T) {
	if err := WriteFile(filepath.Join(t.TempDir(), "no", "such"), []byte("x"), 0o600); err == nil {
		t.Fatal("WriteFile into a missing directory succeeded")
	}
}

func BenchmarkWriteFile(b *testing.B) {
	p := filepath.Join(b.TempDir(), "f")
	data := make([]byte, 4096)
	for b.Loop() {
		if err := WriteFile(p, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReplace(b *testing.B) {
	p := filepath.Join(b.TempDir(), "f")
	data := make([]byte, 4096)
	for b.Loop() {
		if err := Replace(p, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}
