package mocksysfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing/fstest"
)

// LoadMapFS copies the tree at dir, symbolic links included, into a
// MapFS, for tests that change a written tree in memory.
func LoadMapFS(dir string) (fstest.MapFS, error) {
	m := fstest.MapFS{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m[rel] = &fstest.MapFile{Data: []byte(filepath.ToSlash(target)), Mode: fs.ModeSymlink | 0o777}
		case d.IsDir():
			m[rel] = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = &fstest.MapFile{Data: b, Mode: 0o444}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return m, nil
}

// NoLinkFS hides ReadLink, as a file system that cannot read links does;
// Open still resolves links.
type NoLinkFS struct{ FS fs.FS }

// Open opens name in the underlying file system.
func (f NoLinkFS) Open(name string) (fs.File, error) { return f.FS.Open(name) }

// HideFS makes every path under one of Hidden (slash-separated, relative)
// not exist.
type HideFS struct {
	FS     fs.FS
	Hidden []string
}

func (f HideFS) hides(name string) bool {
	for _, h := range f.Hidden {
		if name == h || strings.HasPrefix(name, h+"/") {
			return true
		}
	}
	return false
}

// Open opens name unless it is hidden.
func (f HideFS) Open(name string) (fs.File, error) {
	if f.hides(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return f.FS.Open(name)
}

// ReadLink reads the link name unless it is hidden.
func (f HideFS) ReadLink(name string) (string, error) {
	if f.hides(name) {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrNotExist}
	}
	return fs.ReadLink(f.FS, name)
}

// Lstat describes name, without following a link, unless it is hidden.
func (f HideFS) Lstat(name string) (fs.FileInfo, error) {
	if f.hides(name) {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	}
	return fs.Lstat(f.FS, name)
}
