package gitsource

import (
	"errors"
	"fmt"
	"os"
	"path"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// lockRef takes git's lock of ref name in an on-disk repository: the file
// <gitdir>/<name>.lock, created exclusively, as every git process does
// before it moves a ref (and renames over the ref when done). go-git's
// CheckAndSetReference neither takes nor honours it, so a `git commit`
// or `git pull` on the same branch could rename its lock over the ref
// after go-git compared it, and the lock commit reported made would be
// on no branch. unlock removes the lock; a repository in memory needs
// none (nothing else writes it). A lock already there is another git at
// work (or one that crashed): ErrConflict, saying which file.
func (r *Repo) lockRef(name plumbing.ReferenceName) (unlock func(), err error) {
	fsr, ok := r.storer.(*filesystem.Storage)
	if !ok {
		return func() {}, nil
	}
	fsys := fsr.Filesystem()
	lock := path.Join(name.String()) + ".lock"
	f, err := fsys.OpenFile(lock, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if errors.Is(err, os.ErrExist) {
		// Named from the git directory: in a linked worktree the refs,
		// and their locks, are in the main one's.
		return nil, fmt.Errorf("gitsource: commit locks: %s: %w (%s exists in the repository's git directory; try again, or remove it if no git runs)",
			name.Short(), ErrBranchLocked, lock)
	}
	if err != nil {
		return nil, fmt.Errorf("gitsource: commit locks: lock %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		_ = fsys.Remove(lock)
		return nil, fmt.Errorf("gitsource: commit locks: lock %s: %w", name, err)
	}
	return func() { _ = fsys.Remove(lock) }, nil
}
