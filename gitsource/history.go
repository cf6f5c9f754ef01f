package gitsource

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// LockChange is one file under the lock prefix changed by one commit.
type LockChange struct {
	// Commit is the commit that made the change.
	Commit Hash
	// Time is the commit's committer time.
	Time time.Time
	// Author wrote the commit, at AuthorTime; Subject is its message's
	// first line (readers of history show them without reading the
	// commit again).
	Author     Signature
	AuthorTime time.Time
	Subject    string
	// Trailers are all the commit's trailers (Styrmin-Config-Commit,
	// Styrmin-Retry, …), shared like Locks.
	Trailers []Trailer
	// Path is the file's path from the repository root.
	Path string
	// Deleted reports that the commit removed the file.
	Deleted bool
	// Blob is the file's object after the change (zero when Deleted); two
	// changes with the same Blob have the same content.
	Blob Hash
	// Locks holds the commit's Styrmin-Lock trailers, deployment key →
	// sequence (empty for commits not made by CommitLocks). The changes of
	// one commit share the map (a commit locking 500 deployments has 500
	// changes and 500 trailers): read it, do not change it.
	Locks map[string]int
	// BadTrailers are the commit's Styrmin-Lock trailers that could not be
	// read and were left out of Locks (LockTrailers), shared like Locks.
	// The lockfiles are what counts, so a bad trailer never stops a walk;
	// a reader reports them.
	BadTrailers []error
}

// LockChanges lists, in order, the files under prefix (a directory such as
// "locks", "" for the whole tree) changed by the commits reachable from to
// but not from from. A zero from means "from the root".
//
// Order is deterministic and depends only on the commit graph: oldest first
// along the first-parent chain of to; the commits a merge brings in from its
// other parents come just before the merge, in the same order. Within a
// commit, changes are sorted by path. An ordinary commit is compared with
// its first parent. A merge reports only the files whose merged content
// differs from every parent (the conflict resolutions); what it brings in
// is reported at the commits that made it, so no change is listed twice.
// Commits that change nothing under prefix are left out.
//
// Trees are compared only under prefix, and unchanged subtrees are skipped
// by hash. When from is an ancestor of to through single-parent commits,
// only the new commits are read; otherwise the commits reachable from from
// are walked once to exclude them.
func (r *Repo) LockChanges(from, to Hash, prefix string) ([]LockChange, error) {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		prefix = "."
	}
	if !fs.ValidPath(prefix) {
		return nil, fmt.Errorf("gitsource: lock changes: prefix %q is not a clean relative path", prefix)
	}
	if to.IsZero() {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()

	w := &walker{r: r, commits: commitCache{}, trees: map[plumbing.Hash][]object.TreeEntry{}}
	commits, err := w.between(from.plumbing(), to.plumbing())
	if err != nil {
		return nil, err
	}
	var parts []string
	if prefix != "." {
		parts = strings.Split(prefix, "/")
	}
	var out []LockChange
	for _, c := range commits {
		changes, err := w.commitChanges(c, parts, prefix)
		if err != nil {
			return nil, fmt.Errorf("gitsource: lock changes at %s: %w", c.Hash, err)
		}
		if len(changes) == 0 {
			continue
		}
		locks, bad := LockTrailers(c.Message)
		subject, _, _ := strings.Cut(c.Message, "\n")
		subject = strings.TrimSpace(subject)
		trailers := ParseTrailers(c.Message)
		for _, ch := range changes {
			lc := LockChange{
				Commit:      fromPlumbing(c.Hash),
				Time:        c.Committer.When,
				Author:      Signature{Name: c.Author.Name, Email: c.Author.Email},
				AuthorTime:  c.Author.When,
				Subject:     subject,
				Trailers:    trailers,
				Path:        ch.path,
				Locks:       locks,
				BadTrailers: bad,
			}
			if ch.deleted {
				lc.Deleted = true
			} else {
				lc.Blob = fromPlumbing(ch.hash)
			}
			out = append(out, lc)
		}
	}
	return out, nil
}

// walker caches commits and trees for one LockChanges call; the caller
// holds r.mu.
type walker struct {
	r       *Repo
	commits commitCache
	trees   map[plumbing.Hash][]object.TreeEntry
}

func (w *walker) commit(h plumbing.Hash) (*object.Commit, error) { return w.commits.get(w.r, h) }

// commitCache holds the commits a walk read, until it drops them (a walk
// that never comes back to a commit deletes it).
type commitCache map[plumbing.Hash]*object.Commit

// get returns commit h, read from r's storer the first time.
func (cc commitCache) get(r *Repo, h plumbing.Hash) (*object.Commit, error) {
	if c, ok := cc[h]; ok {
		return c, nil
	}
	c, err := object.GetCommit(r.storer, h)
	if err != nil {
		return nil, r.commitError(h, err)
	}
	cc[h] = c
	return c, nil
}

func (w *walker) tree(h plumbing.Hash) ([]object.TreeEntry, error) {
	if h.IsZero() {
		return nil, nil
	}
	if t, ok := w.trees[h]; ok {
		return t, nil
	}
	t, err := object.GetTree(w.r.storer, h)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	w.trees[h] = t.Entries
	return t.Entries, nil
}

// between returns the commits reachable from to but not from from, in the
// order documented on LockChanges.
func (w *walker) between(from, to plumbing.Hash) ([]*object.Commit, error) {
	if from == to {
		return nil, nil
	}
	if !from.IsZero() {
		// Fast path: a chain of single-parent commits from to back to from.
		var chain []*object.Commit
		for h := to; ; {
			c, err := w.commit(h)
			if err != nil {
				return nil, err
			}
			chain = append(chain, c)
			if len(c.ParentHashes) != 1 {
				break
			}
			h = c.ParentHashes[0]
			if h == from {
				slices.Reverse(chain)
				return chain, nil
			}
		}
	}

	excluded := map[plumbing.Hash]bool{}
	if !from.IsZero() {
		stack := []plumbing.Hash{from}
		excluded[from] = true
		for len(stack) > 0 {
			h := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			c, err := w.commit(h)
			if err != nil {
				return nil, err
			}
			for _, p := range c.ParentHashes {
				if !excluded[p] {
					excluded[p] = true
					stack = append(stack, p)
				}
			}
		}
		// The excluded commits are not needed again; keep memory flat.
		for h := range excluded {
			delete(w.commits, h)
		}
	}
	if excluded[to] {
		return nil, nil
	}

	// Iterative post-order walk, first parent first: a commit is emitted
	// after all its (new) ancestors, the first-parent history before the
	// side branches a merge brings in.
	type frame struct {
		c    *object.Commit
		next int
	}
	var out []*object.Commit
	top, err := w.commit(to)
	if err != nil {
		return nil, err
	}
	visited := map[plumbing.Hash]bool{to: true}
	stack := []frame{{c: top}}
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if f.next < len(f.c.ParentHashes) {
			p := f.c.ParentHashes[f.next]
			f.next++
			if excluded[p] || visited[p] {
				continue
			}
			visited[p] = true
			pc, err := w.commit(p)
			if err != nil {
				return nil, err
			}
			stack = append(stack, frame{c: pc})
			continue
		}
		out = append(out, f.c)
		stack = stack[:len(stack)-1]
	}
	return out, nil
}

// subtree returns the hash of the directory parts below tree root, zero if
// it does not exist or is not a directory.
func (w *walker) subtree(root plumbing.Hash, parts []string) (plumbing.Hash, error) {
	return subtreeOf(root, parts, w.tree)
}

// subtreeOf is the hash of the directory parts below tree root, zero if it
// does not exist or is not a directory, reading trees through entries (a
// walk's cache, or none).
func subtreeOf(root plumbing.Hash, parts []string, entriesOf func(plumbing.Hash) ([]object.TreeEntry, error)) (plumbing.Hash, error) {
	cur := root
	for _, part := range parts {
		entries, err := entriesOf(cur)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		next := plumbing.ZeroHash
		for _, e := range entries {
			if e.Name == part && e.Mode == filemode.Dir {
				next = e.Hash
				break
			}
		}
		if next.IsZero() {
			return next, nil
		}
		cur = next
	}
	return cur, nil
}

type fileChange struct {
	path    string
	deleted bool
	hash    plumbing.Hash
	mode    filemode.FileMode
}

// commitChanges returns c's changes under the prefix directory parts.
func (w *walker) commitChanges(c *object.Commit, parts []string, dir string) ([]fileChange, error) {
	after, err := w.subtree(c.TreeHash, parts)
	if err != nil {
		return nil, err
	}
	if len(c.ParentHashes) == 0 {
		return w.diffSorted(plumbing.ZeroHash, after, dir)
	}
	var result []fileChange
	for i, ph := range c.ParentHashes {
		p, err := w.commit(ph)
		if err != nil {
			return nil, err
		}
		before, err := w.subtree(p.TreeHash, parts)
		if err != nil {
			return nil, err
		}
		d, err := w.diffSorted(before, after, dir)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			result = d
			continue
		}
		// A merge keeps only the paths that differ from every parent.
		keep := make(map[string]bool, len(d))
		for _, ch := range d {
			keep[ch.path] = true
		}
		result = slices.DeleteFunc(result, func(ch fileChange) bool { return !keep[ch.path] })
		if len(result) == 0 {
			return nil, nil
		}
	}
	return result, nil
}

func (w *walker) diffSorted(a, b plumbing.Hash, dir string) ([]fileChange, error) {
	var out []fileChange
	if err := w.diff(a, b, dir, &out); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(x, y fileChange) int { return strings.Compare(x.path, y.path) })
	return out, nil
}

// diff appends the non-directory entries that differ between trees a and b
// (either may be zero, the empty tree), skipping identical subtrees.
func (w *walker) diff(a, b plumbing.Hash, dir string, out *[]fileChange) error {
	if a == b {
		return nil
	}
	ea, err := w.tree(a)
	if err != nil {
		return err
	}
	eb, err := w.tree(b)
	if err != nil {
		return err
	}
	byName := make(map[string]object.TreeEntry, len(ea))
	for _, e := range ea {
		byName[e.Name] = e
	}
	seen := make(map[string]bool, len(eb))
	join := func(name string) string {
		if dir == "." {
			return name
		}
		return path.Join(dir, name)
	}
	for _, y := range eb {
		seen[y.Name] = true
		x, inA := byName[y.Name]
		if inA && x.Hash == y.Hash && x.Mode == y.Mode {
			continue
		}
		p := join(y.Name)
		xDir := inA && x.Mode == filemode.Dir
		switch {
		case y.Mode == filemode.Dir && xDir:
			if err := w.diff(x.Hash, y.Hash, p, out); err != nil {
				return err
			}
		case y.Mode == filemode.Dir:
			if inA { // a file became a directory
				*out = append(*out, fileChange{path: p, deleted: true})
			}
			if err := w.diff(plumbing.ZeroHash, y.Hash, p, out); err != nil {
				return err
			}
		default:
			if xDir { // a directory became a file
				if err := w.diff(x.Hash, plumbing.ZeroHash, p, out); err != nil {
					return err
				}
			}
			*out = append(*out, fileChange{path: p, hash: y.Hash, mode: y.Mode})
		}
	}
	for _, x := range ea {
		if seen[x.Name] {
			continue
		}
		p := join(x.Name)
		if x.Mode == filemode.Dir {
			if err := w.diff(x.Hash, plumbing.ZeroHash, p, out); err != nil {
				return err
			}
			continue
		}
		*out = append(*out, fileChange{path: p, deleted: true})
	}
	return nil
}

// Message returns a commit's message (its trailers included); a commit
// the repository does not hold gives an error wrapping ErrCommitNotFound.
func (r *Repo) Message(commit Hash) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := object.GetCommit(r.storer, commit.plumbing())
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return "", fmt.Errorf("gitsource: message of %s: %w", commit.Short(), ErrCommitNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("gitsource: message of %s: %w", commit.Short(), err)
	}
	return c.Message, nil
}

// Descends reports whether head is from or a descendant of it: whether a
// branch that was at from and is now at head only moved forward. A from
// that the repository does not hold (a commit of a history rewritten and
// fetched away, or a clone made after the rewrite) does not descend: its
// history is no longer the branch's. A zero from is the root, which every
// head descends from.
func (r *Repo) Descends(head, from Hash) (bool, error) {
	if from.IsZero() || head == from {
		return true, nil
	}
	if head.IsZero() {
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := object.GetCommit(r.storer, from.plumbing()); err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return false, nil
		}
		return false, commitError(from.plumbing(), err)
	}
	w := &walker{r: r, commits: commitCache{}, trees: map[plumbing.Hash][]object.TreeEntry{}}
	seen := map[plumbing.Hash]bool{head.plumbing(): true}
	stack := []plumbing.Hash{head.plumbing()}
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if h == from.plumbing() {
			return true, nil
		}
		c, err := w.commit(h)
		if err != nil {
			return false, err
		}
		// Only the parents are needed again: keep memory flat on a long
		// history.
		delete(w.commits, h)
		for _, p := range c.ParentHashes {
			if !seen[p] {
				seen[p] = true
				stack = append(stack, p)
			}
		}
	}
	return false, nil
}

// Holds reports whether the tracked branch, as last fetched, holds
// commit: it is the head or one of its ancestors. A commit the
// repository does not have is not held (a history rewritten and fetched
// away, or a clone made after it). Answers are kept until the head moves:
// the tasks of one lock commit ask about it hundreds of times.
func (r *Repo) Holds(commit Hash) (bool, error) {
	head, err := r.Head()
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	if r.held != nil && r.held.head == head {
		if ok, known := r.held.commits[commit]; known {
			r.mu.Unlock()
			return ok, nil
		}
	}
	r.mu.Unlock()
	ok, err := r.Descends(head, commit)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held == nil || r.held.head != head || len(r.held.commits) >= maxHeld {
		r.held = &heldCommits{head: head, commits: map[Hash]bool{}}
	}
	r.held.commits[commit] = ok
	return ok, nil
}

// heldCommits are Holds' answers at one head.
type heldCommits struct {
	head    Hash
	commits map[Hash]bool
}

// maxHeld bounds the answers kept at one head.
const maxHeld = 4096
