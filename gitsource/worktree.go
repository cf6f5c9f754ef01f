package gitsource

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/util"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// localWorktree is the worktree whose HEAD is the branch CommitLocks moves
// in local mode.
type localWorktree struct {
	r  *Repo
	wt *git.Worktree
	// index is git's lock of the index while lockIndex holds it: the
	// index's next content is written there and renamed over it.
	index billy.File
}

// indexLockName is git's lock of the index, in the worktree's own git
// directory (a linked worktree has its own index).
const indexLockName = "index.lock"

// lockIndex takes git's lock of the index (<gitdir>/index.lock, created
// exclusively), as every git process does before it writes the index.
// go-git's SetIndex neither takes nor honours it and rewrites the index
// in place: a `git add` or an editor's `git status` at the same moment
// renamed its index over the lock commit's entries (git then showed the
// lock reverted, staged, for the next commit to take), and a process
// killed during the write left a truncated index every git command
// refused. Held from the check of the paths to the index's replacement;
// release removes it unless writeIndex renamed it. A lock already there
// is another git at work (or one that crashed): ErrIndexLocked, naming
// the file, before anything is committed. A repository in memory needs
// none (nothing else writes it).
func (l *localWorktree) lockIndex() (release func(), err error) {
	fsr, ok := l.r.storer.(*filesystem.Storage)
	if !ok {
		return func() {}, nil
	}
	fsys := fsr.Filesystem()
	f, err := fsys.OpenFile(indexLockName, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("gitsource: commit locks: %w (%s exists in the worktree's git directory; try again, or remove it if no git runs)", ErrIndexLocked, indexLockName)
	}
	if err != nil {
		return nil, fmt.Errorf("gitsource: commit locks: lock the index: %w", err)
	}
	l.index = f
	return func() {
		if l.index != nil {
			_ = l.index.Close()
			_ = fsys.Remove(indexLockName)
			l.index = nil
		}
	}, nil
}

// writeIndex writes idx: into the lock lockIndex holds, then renamed over
// the index, so a reader sees the old index or the new, never part of one;
// without a lock (a repository in memory), through the storer.
func (l *localWorktree) writeIndex(idx *index.Index) error {
	if l.index == nil {
		return l.r.storer.SetIndex(idx)
	}
	f := l.index
	l.index = nil // written or failed, release has nothing left to do but remove
	fsys := l.r.storer.(*filesystem.Storage).Filesystem()
	bw := bufio.NewWriter(f)
	err := index.NewEncoder(bw).Encode(idx)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(indexLockName, "index")
	}
	if err != nil {
		_ = fsys.Remove(indexLockName)
	}
	return err
}

// checkedOutWorktree returns the worktree when the tracked branch is checked
// out in it (local mode only), nil otherwise. The caller holds r.mu.
func (r *Repo) checkedOutWorktree() *localWorktree {
	if r.remoteName != "" || r.worktreeDir == "" {
		return nil
	}
	head, err := r.storer.Reference(plumbing.HEAD)
	if err != nil || head.Type() != plumbing.SymbolicReference || head.Target() != r.trackingRef() {
		return nil
	}
	wt, err := r.repo.Worktree()
	if err != nil {
		return nil
	}
	if idx, err := r.storer.Index(); err == nil && len(idx.Entries) == 0 {
		// Nothing checked out (git clone --no-checkout, a CI cache): no
		// index and no files to keep in step, as in a bare repository.
		// Taken as a checkout, every lockfile HEAD holds read as deleted
		// in the index, refusing each commit after the first.
		return nil
	}
	return &localWorktree{r: r, wt: wt}
}

// checkClean refuses to go on when a path about to change differs, in the
// index or in the worktree, from its committed content old.
func (l *localWorktree) checkClean(files map[string][]byte, old map[string]object.TreeEntry) error {
	idx, err := l.r.storer.Index()
	if err != nil {
		return fmt.Errorf("gitsource: commit locks: read index: %w", err)
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		want := old[p].Hash // zero: not in the commit
		dirty := func(where string) error {
			hint := ""
			if !want.IsZero() {
				// A lock killed between its commit and the index's update
				// leaves both as before the commit (and index.lock).
				hint = fmt.Sprintf(" (after a lock killed while it committed, its commit is on the branch: `git checkout HEAD -- %s` restores the file)", p)
			}
			return fmt.Errorf("gitsource: commit locks: %s has %w in the %s; commit or discard them first%s", p, ErrDirtyWorktree, where, hint)
		}
		e, err := idx.Entry(p)
		switch {
		case errors.Is(err, index.ErrEntryNotFound):
			if !want.IsZero() {
				return dirty("index")
			}
		case err != nil:
			return fmt.Errorf("gitsource: commit locks: read index: %w", err)
		case e.Hash != want || e.Stage != 0: // stage 0: not in a conflict
			return dirty("index")
		}
		fi, err := l.wt.Filesystem.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if !want.IsZero() {
				return dirty("worktree")
			}
			continue
		case err != nil:
			return fmt.Errorf("gitsource: commit locks: %s: %w", p, err)
		case !fi.Mode().IsRegular() || want.IsZero():
			return dirty("worktree")
		}
		data, err := util.ReadFile(l.wt.Filesystem, p)
		if err != nil {
			return fmt.Errorf("gitsource: commit locks: %s: %w", p, err)
		}
		if plumbing.ComputeHash(plumbing.BlobObject, data) != want {
			return dirty("worktree")
		}
	}
	return nil
}

// update writes the changed files to the worktree and the index.
func (l *localWorktree) update(files map[string][]byte) error {
	fsys := l.wt.Filesystem
	for _, p := range slices.Sorted(maps.Keys(files)) {
		content := files[p]
		if content == nil {
			if _, err := fsys.Lstat(p); errors.Is(err, os.ErrNotExist) {
				continue // it was not there (stage drops its entry)
			}
			// The index entry goes in stage, with the others: go-git's
			// Worktree.Remove writes the index on its own.
			if err := fsys.Remove(p); err != nil {
				return fmt.Errorf("remove %s: %w", p, err)
			}
			// git removes the directories a deletion leaves empty.
			for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
				entries, err := fsys.ReadDir(dir)
				if err != nil || len(entries) > 0 {
					break
				}
				if err := fsys.Remove(dir); err != nil {
					break
				}
			}
			continue
		}
		perm := os.FileMode(0o644)
		if fi, err := fsys.Lstat(p); err == nil && fi.Mode()&0o111 != 0 {
			perm = 0o755 // keep an executable file executable, as the tree does
		}
		if err := fsys.MkdirAll(path.Dir(p), 0o755); err != nil {
			return fmt.Errorf("create directory of %s: %w", p, err)
		}
		if err := replaceFile(fsys, p, content, perm); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return l.stage(files)
}

// replaceFile writes content to p through a file beside it renamed over
// p, so a reader (an editor, a build) sees the old file or the new, and a
// lock killed during the write leaves the old one whole, not a lockfile
// cut short beside a commit that holds it all.
func replaceFile(fsys billy.Filesystem, p string, content []byte, perm os.FileMode) error {
	// The worktree's filesystem makes no temporary files and changes no
	// modes: a name of its own, created exclusively with the file's mode
	// (the umask applies, as to git's).
	f, err := fsys.OpenFile(path.Join(path.Dir(p), "."+path.Base(p)+".styrmin-"+rand.Text()), os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(f.Name(), p)
	}
	if err != nil {
		_ = fsys.Remove(f.Name())
	}
	return err
}

// stage records the written files in the index, as `git add` would (and
// drops the removed ones, as `git rm`): one read and one write of the
// index for the whole change (git's Add reads and writes it per file, and
// stores each blob again, which the commit already holds), each entry with
// the file's stat data so git sees the worktree clean without refreshing
// the index.
func (l *localWorktree) stage(files map[string][]byte) error {
	idx, err := l.r.storer.Index()
	if err != nil {
		return fmt.Errorf("read the index: %w", err)
	}
	byName := make(map[string]*index.Entry, len(idx.Entries))
	for _, e := range idx.Entries {
		if e.Stage == 0 {
			byName[e.Name] = e
		}
	}
	fsys := l.wt.Filesystem
	for _, p := range slices.Sorted(maps.Keys(files)) {
		content := files[p]
		if content == nil {
			if _, err := idx.Remove(p); err != nil && !errors.Is(err, index.ErrEntryNotFound) {
				return fmt.Errorf("stage the removal of %s: %w", p, err)
			}
			delete(byName, p)
			continue
		}
		info, err := fsys.Lstat(p)
		if err != nil {
			return fmt.Errorf("stage %s: %w", p, err)
		}
		e := byName[p]
		if e == nil {
			e = idx.Add(p)
			byName[p] = e
		}
		e.Hash = plumbing.ComputeHash(plumbing.BlobObject, content)
		e.ModifiedAt = info.ModTime()
		if e.Mode, err = filemode.NewFromOSFileMode(info.Mode()); err != nil {
			return fmt.Errorf("stage %s: %w", p, err)
		}
		e.Size = uint32(info.Size())
		fillStat(e, info.Sys())
	}
	if err := l.writeIndex(idx); err != nil {
		return fmt.Errorf("write the index: %w", err)
	}
	return nil
}
