package gitsource

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// ErrTooManyUnlocked reports a walk for unlocked changes that went further
// back than its limit without finding where the locks last changed.
var ErrTooManyUnlocked = errors.New("too many commits since the locks last changed")

// Unlocked is what changed on a branch since its locks last changed.
type Unlocked struct {
	// Base is the newest first-parent ancestor of the head (the head
	// itself included) that changed the lock folder: the last lock commit,
	// or a merge that brought lockfiles in. Zero when no commit ever did.
	Base Hash
	// Commits are the first-parent commits after Base, oldest first, that
	// change something in the folder outside its lock folder (each a
	// change of the configuration: a merged pull request counts once).
	Commits []Hash
}

// UnlockedChanges walks the first-parent chain back from head and returns
// the configuration commits made since the lock folder (lockDir, inside the
// folder dir) last changed. It reads commits and the top trees only, never
// file contents. A walk longer than limit commits (0: no limit) fails with
// ErrTooManyUnlocked.
func (r *Repo) UnlockedChanges(head Hash, dir, lockDir string, limit int) (Unlocked, error) {
	var out Unlocked
	dir = strings.Trim(dir, "/")
	var parts []string
	if dir != "" && dir != "." {
		parts = strings.Split(dir, "/")
	}
	if head.IsZero() {
		return out, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := &walker{r: r, commits: map[plumbing.Hash]*object.Commit{}, trees: map[plumbing.Hash][]object.TreeEntry{}}
	type state struct{ locks, config string }
	at := func(c *object.Commit) (state, error) {
		root, err := w.subtree(c.TreeHash, parts)
		if err != nil {
			return state{}, err
		}
		entries, err := w.tree(root)
		if err != nil {
			return state{}, err
		}
		var st state
		var b strings.Builder
		for _, e := range entries {
			if e.Name == lockDir {
				st.locks = e.Hash.String()
				continue
			}
			fmt.Fprintf(&b, "%s %o %s\n", e.Name, uint32(e.Mode), e.Hash)
		}
		st.config = b.String()
		return st, nil
	}
	var newest []Hash // newest first
	h := head.plumbing()
	for n := 0; ; n++ {
		if limit > 0 && n > limit {
			return Unlocked{}, fmt.Errorf("gitsource: %s: %w (more than %d)", head.Short(), ErrTooManyUnlocked, limit)
		}
		c, err := w.commit(h)
		if err != nil {
			return Unlocked{}, err
		}
		cur, err := at(c)
		if err != nil {
			return Unlocked{}, err
		}
		if len(c.ParentHashes) == 0 {
			if cur.locks != "" {
				out.Base = fromPlumbing(c.Hash)
			} else if cur.config != "" {
				newest = append(newest, fromPlumbing(c.Hash))
			}
			break
		}
		p, err := w.commit(c.ParentHashes[0])
		if err != nil {
			return Unlocked{}, err
		}
		prev, err := at(p)
		if err != nil {
			return Unlocked{}, err
		}
		if cur.locks != prev.locks {
			out.Base = fromPlumbing(c.Hash)
			break
		}
		if cur.config != prev.config {
			newest = append(newest, fromPlumbing(c.Hash))
		}
		// Only the first-parent chain is walked; drop what is behind.
		delete(w.commits, h)
		h = c.ParentHashes[0]
	}
	for i := len(newest) - 1; i >= 0; i-- {
		out.Commits = append(out.Commits, newest[i])
	}
	return out, nil
}

// LockedSequences returns, for every deployment key that a Styrmin-Lock
// trailer of a commit reachable from head names, the highest sequence
// named: the numbers the branch's history has used, whatever became of
// the lockfiles since. Trailers that do not parse are skipped
// (LockTrailers). The answer for the last head asked is kept, so the
// next call reads only the commits added since.
func (r *Repo) LockedSequences(head Hash) (map[string]int, error) {
	if head.IsZero() {
		return map[string]int{}, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seqCache != nil && r.seqCache.head == head {
		return maps.Clone(r.seqCache.max), nil
	}
	out := map[string]int{}
	seen := map[plumbing.Hash]bool{head.plumbing(): true}
	stack := []plumbing.Hash{head.plumbing()}
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if r.seqCache != nil && h == r.seqCache.head.plumbing() {
			for k, v := range r.seqCache.max {
				out[k] = max(out[k], v)
			}
			continue
		}
		c, err := object.GetCommit(r.storer, h)
		if err != nil {
			return nil, commitError(h, err)
		}
		// A malformed trailer is skipped: the lockfiles hold the numbers
		// (resolver.UsedSequences takes the higher of both), and one bad
		// line must not stop every later lock.
		locks, _ := LockTrailers(c.Message)
		for k, v := range locks {
			out[k] = max(out[k], v)
		}
		for _, p := range c.ParentHashes {
			if !seen[p] {
				seen[p] = true
				stack = append(stack, p)
			}
		}
	}
	r.seqCache = &sequenceCache{head: head, max: out}
	return maps.Clone(out), nil
}

// sequenceCache is LockedSequences' answer for one head.
type sequenceCache struct {
	head Hash
	max  map[string]int
}

// History is what a locker reads of a branch beyond one tree: the
// configuration commits since the last lock, the numbers ever used, and
// the trees of those commits.
type History interface {
	UnlockedChanges(head Hash, dir, lockDir string, limit int) (Unlocked, error)
	LockedSequences(head Hash) (map[string]int, error)
	TreeAt(commit Hash, sub string) (fs.FS, error)
	Message(commit Hash) (string, error)
}

var _ History = (*Repo)(nil)

// SameFiles reports whether the files under paths (files or folders,
// slash-separated, relative to sub) of fsys, for example a working tree,
// hold exactly what commit's tree holds at sub: same names, same content.
// Missing paths on both sides are equal.
func (r *Repo) SameFiles(commit Hash, sub string, fsys fs.FS, paths []string) (bool, error) {
	tree, err := r.TreeAt(commit, sub)
	if err != nil {
		return false, err
	}
	for _, p := range paths {
		a, err := blobHashes(tree, p, true)
		if err != nil {
			return false, err
		}
		b, err := blobHashes(fsys, p, false)
		if err != nil {
			return false, err
		}
		if !maps.Equal(a, b) {
			return false, nil
		}
	}
	return true, nil
}

// blobHashes maps every regular file under root of fsys to its git blob
// hash; inTree says fsys is a commit's tree, whose entries carry it.
func blobHashes(fsys fs.FS, root string, inTree bool) (map[string]plumbing.Hash, error) {
	out := map[string]plumbing.Hash{}
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == root {
			return fs.SkipDir
		}
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if inTree {
			// The tree entry holds the hash: no need to read the blob,
			// as Info does for its size.
			if e, ok := d.(*dirEntry); ok {
				out[p] = e.e.Hash
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if h, ok := fi.Sys().(Hash); ok {
				out[p] = h.plumbing()
				return nil
			}
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		out[p] = plumbing.ComputeHash(plumbing.BlobObject, data)
		return nil
	})
	return out, err
}
