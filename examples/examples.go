package examples

import (
	"embed"
	"io/fs"
	"os"
	"path/filepath"
)

// repo holds the desired-state repository: settings, clusters and drivers
// (not the CI examples, nor locks: the engine writes those).
//
//go:embed styrmin.cue all:clusters all:drivers
var repo embed.FS

// Repo returns the example desired-state repository as a read-only file
// system rooted at the repository's top.
func Repo() fs.FS { return repo }

// WriteTo copies the example repository into dir (created if missing), so a
// test or the demo can change it and commit it.
func WriteTo(dir string) error {
	return fs.WalkDir(repo, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := fs.ReadFile(repo, p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
}
