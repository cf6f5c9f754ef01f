package gitsource

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// ErrTooManyUnlocked reports a walk for unlocked changes that went further
// back than its limit without finding where the locks last changed.
var ErrTooManyUnlocked = errors.New("too many commits since the locks last changed")

// Unlocked is what changed on a branch since its locks last changed.
type Unlocked struct {
	// Base is the newest first-parent ancestor of the head (the head
	// itself included) that changed the lock folder other than by locking
	// the same instances again (a retry): the last lock commit, or a merge
	// that brought lockfiles in. Zero when no commit ever did.
	Base Hash
	// Commits are the first-parent commits after Base, oldest first, that
	// change something in the folder outside its lock folder (each a
	// change of the configuration: a merged pull request counts once).
	Commits []Hash
}

// UnlockedChanges walks the first-parent chain back from head and returns
// the configuration commits made since the lock folder (lockDir, inside the
// folder dir) last changed. A commit that only locks the same instances
// again (relocksOnly) is no lock of the configuration, and the walk goes on
// past it. It reads commits and the top trees, and the lockfiles a commit
// changes only when it changes the lock folder. A walk longer than limit
// commits (0: no limit) fails with ErrTooManyUnlocked.
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
	type state struct {
		locks  object.TreeEntry // zero when there is no lock folder
		config string
	}
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
				st.locks = e
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
			if !cur.locks.Hash.IsZero() {
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
		if cur.locks.Hash != prev.locks.Hash || cur.locks.Mode != prev.locks.Mode {
			// A commit that only locks the same instances again (a
			// retry) locks no configuration: taken for the last lock, it
			// would merge the configuration commits before it into the
			// next one (one instance for two upgrades).
			relock, err := w.relocksOnly(prev.locks, cur.locks)
			if err != nil {
				return Unlocked{}, err
			}
			if !relock {
				out.Base = fromPlumbing(c.Hash)
				break
			}
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

// maxRelockCompare bounds a lockfile read to tell a retry from a lock
// (a lockfile is at most 4 MiB; a larger blob is no lockfile's retry).
const maxRelockCompare = 8 << 20

// relocksOnly reports whether the lock folder went from a to b by locking
// the same instances again and nothing else: every file of b is a file of
// a, none added or removed, and each one that changed differs only in its
// top-level sequence and checksum lines. That is what a retry writes
// (styrminctl retry, the lock mode's retries); a lock of a configuration
// change changes an instance's digest, its upgrade request or its
// tombstone, and a hand edit anything else, so those stay the last lock.
// The content decides, not the Styrmin-Retry trailer: trailers are hints.
// Only the files that changed are read, and a lock commit's first one
// usually ends it.
func (w *walker) relocksOnly(a, b object.TreeEntry) (bool, error) {
	if a.Hash.IsZero() || b.Hash.IsZero() || a.Mode != filemode.Dir || b.Mode != filemode.Dir {
		return false, nil
	}
	return w.sameInstances(a.Hash, b.Hash)
}

func (w *walker) sameInstances(a, b plumbing.Hash) (bool, error) {
	ea, err := w.tree(a)
	if err != nil {
		return false, err
	}
	eb, err := w.tree(b)
	if err != nil {
		return false, err
	}
	if len(ea) != len(eb) {
		return false, nil
	}
	for i := range ea {
		x, y := ea[i], eb[i]
		if x.Name != y.Name || x.Mode != y.Mode {
			return false, nil
		}
		if x.Hash == y.Hash {
			continue
		}
		var same bool
		switch x.Mode {
		case filemode.Dir:
			same, err = w.sameInstances(x.Hash, y.Hash)
		case filemode.Regular, filemode.Executable:
			same, err = w.relockedFile(x.Hash, y.Hash)
		}
		if err != nil || !same {
			return false, err
		}
	}
	return true, nil
}

// relockedFile reports whether two lockfile blobs differ only in their
// top-level sequence and checksum lines (nested keys are indented).
func (w *walker) relockedFile(a, b plumbing.Hash) (bool, error) {
	read := func(h plumbing.Hash) ([]byte, error) {
		blob, err := object.GetBlob(w.r.storer, h)
		if err != nil {
			return nil, fmt.Errorf("blob %s: %w", h, err)
		}
		if blob.Size > maxRelockCompare {
			return nil, nil
		}
		rd, err := blob.Reader()
		if err != nil {
			return nil, fmt.Errorf("blob %s: %w", h, err)
		}
		defer rd.Close()
		data, err := io.ReadAll(rd)
		if err != nil {
			return nil, fmt.Errorf("blob %s: %w", h, err)
		}
		return data, nil
	}
	da, err := read(a)
	if err != nil || da == nil {
		return false, err
	}
	db, err := read(b)
	if err != nil || db == nil {
		return false, err
	}
	return bytes.Equal(withoutSequence(da), withoutSequence(db)), nil
}

// withoutSequence drops a lockfile's top-level sequence and checksum lines.
func withoutSequence(data []byte) []byte {
	out := make([]byte, 0, len(data))
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line = data[:i+1]
		}
		data = data[len(line):]
		if bytes.HasPrefix(line, []byte("sequence:")) || bytes.HasPrefix(line, []byte("checksum:")) {
			continue
		}
		out = append(out, line...)
	}
	return out
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
