package mocksysfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
