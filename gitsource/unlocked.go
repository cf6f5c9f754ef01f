package gitsource

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strconv"
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
	w := &walker{r: r, commits: commitCache{}, trees: map[plumbing.Hash][]object.TreeEntry{}}
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
			return nil, w.r.blobError(h, err)
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

// LockedSequences returns, for every deployment key, the highest sequence
// a commit reachable from head used for it: what its Styrmin-Lock
// trailers name, what Styrmin-Lock lines its message holds above its
// trailer block (a squash merge keeps the squashed commits' messages in
// its body, and only its last paragraph is read as trailers), and, for a
// commit that is not a lock commit as CommitLocks writes it
// (writtenByCommitLocks: no lock trailers, a malformed one, a squash merge
// that kept only the squashed commits' subjects, a hand-edited or
// rewritten message), what the lockfiles it wrote under lockDir of the
// folder dir hold that none of its trailers and body lines names (a
// lockfile committed by hand after `styrminctl lock`). So a number stays
// used whatever became of the lockfile since (deleted, or restored to an
// older content). Trailers that do not parse are skipped (LockTrailers).
// The answer for the last head and folder asked is kept, so the next call
// reads only the commits added since.
//
// Cost: besides each commit, for each commit but CommitLocks' lock
// commits the lock folder's tree of it and its parents (one tree per
// folder of the path), the subtrees that differ and the blobs of the
// lockfiles it wrote. A lock commit as CommitLocks wrote it is taken at
// its trailers' word: it writes a trailer per lockfile, and reading every
// lock commit's trees made a lock of 2,000 lock commits take five times
// as long.
func (r *Repo) LockedSequences(head Hash, dir, lockDir string) (map[string]int, error) {
	s, err := r.sequences(head, dir, lockDir)
	if err != nil {
		return nil, err
	}
	return maps.Clone(s.max), nil
}

// ReusedSequences returns, for every deployment key whose highest sequence
// (as LockedSequences counts it) commits reachable from head used for more
// than one instance, that sequence: lockfiles of the key at that number
// with different digests, as two pull requests branched from one commit
// leave once both are merged (each locked the next number for a change of
// its own, and the merge kept one of the lockfiles), or a lockfile edited
// by hand at its number. The agent ran the one it met first and refuses
// the other at the same number ("does not follow"), so a lockfile at a
// reused number is no instance the cluster can be brought to: the lock
// writes it again, past that number.
//
// It shares LockedSequences' walk and kept answer. The lockfiles are read
// only for a key whose highest number more than one commit names or
// wrote, and their blobs only when those differ: a history where each
// number is locked once costs nothing more.
func (r *Repo) ReusedSequences(head Hash, dir, lockDir string) (map[string]int, error) {
	s, err := r.sequences(head, dir, lockDir)
	if err != nil {
		return nil, err
	}
	return maps.Clone(s.reused), nil
}

// sequences is LockedSequences' and ReusedSequences' answer for head and
// the lock folder lockDir of dir: the kept one when it is head's, else a
// walk of the commits from head down to the kept head. What it returns is
// never changed afterwards (the next walk builds its own maps).
func (r *Repo) sequences(head Hash, dir, lockDir string) (*sequenceCache, error) {
	if head.IsZero() {
		return &sequenceCache{max: map[string]int{}, reused: map[string]int{}}, nil
	}
	dir = strings.Trim(dir, "/")
	var parts []string
	if dir != "" && dir != "." {
		parts = strings.Split(dir, "/")
	}
	parts = append(parts, lockDir)
	folder := strings.Join(parts, "/")
	r.mu.Lock()
	defer r.mu.Unlock()
	cached := r.seqCache
	if cached != nil && cached.folder != folder {
		cached = nil
	}
	if cached != nil && cached.head == head {
		return cached, nil
	}
	sr := &sequenceReader{r: r, parts: parts, lockTrees: map[plumbing.Hash]plumbing.Hash{}, commits: commitCache{}}
	u := &usedSequences{max: map[string]int{}, at: map[string][]plumbing.Hash{}}
	seen := map[plumbing.Hash]bool{head.plumbing(): true}
	stack := []plumbing.Hash{head.plumbing()}
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if cached != nil && h == cached.head.plumbing() {
			for k, v := range cached.max {
				for _, c := range cached.at[k] {
					u.note(k, v, c)
				}
			}
			continue
		}
		c, err := sr.commit(h)
		if err != nil {
			return nil, err
		}
		// A malformed trailer is skipped: the lockfiles hold the numbers
		// (resolver.UsedSequences takes the higher of both), and one bad
		// line must not stop every later lock.
		locks, bad := LockTrailers(c.Message)
		for k, v := range locks {
			u.note(k, v, h)
		}
		// A squash merge of several lock commits keeps the others' lines
		// in its body: their numbers were used too. Counting a line quoted
		// in prose only skips a number, never reuses one.
		for k, v := range bodyLocks(c.Message) {
			u.note(k, v, h)
		}
		// A lock commit as CommitLocks wrote it names every lockfile it
		// writes in its trailers, so it is taken at their word: reading
		// every lock commit's lockfiles would make each lock of a large
		// repository read its whole history. Any other commit (none or a
		// malformed trailer, a squash merge that kept only the squashed
		// commits' subjects, a hand-edited message) has every lockfile it
		// wrote read: a line naming a key says nothing of the number a
		// lockfile folded in after it (a later hand commit of the same
		// deployment, squashed with it).
		if len(locks) == 0 || len(bad) > 0 || !writtenByCommitLocks(c, locks) {
			if err := sr.unnamed(c, nil, u); err != nil {
				return nil, err
			}
		}
		delete(sr.commits, h) // the walk never comes back to it
		for _, p := range c.ParentHashes {
			if !seen[p] {
				seen[p] = true
				stack = append(stack, p)
			}
		}
	}
	reused, err := sr.reused(u)
	if err != nil {
		return nil, err
	}
	r.seqCache = &sequenceCache{head: head, folder: folder, max: u.max, at: u.at, reused: reused}
	return r.seqCache, nil
}

// sequenceCache is the answer of LockedSequences and ReusedSequences for
// one head and lock folder.
type sequenceCache struct {
	head   Hash
	folder string
	max    map[string]int
	// at are, per key, the commits that named or wrote its highest
	// sequence: a later walk that meets the head adds them to its own.
	at     map[string][]plumbing.Hash
	reused map[string]int
}

// usedSequences is what a walk has found so far: each key's highest
// sequence and the commits that used it.
type usedSequences struct {
	max map[string]int
	at  map[string][]plumbing.Hash
}

// note records that commit c used seq for key. A sequence outside
// 1..maxSequence-1 is ignored, as resolver.UsedFromTrailers ignores it:
// kept as the highest, it would be dropped there and take the real
// highest with it, and a lock could use that number again.
func (u *usedSequences) note(key string, seq int, c plumbing.Hash) {
	if seq < 1 || seq >= maxSequence {
		return
	}
	cur, ok := u.max[key]
	switch {
	case !ok || seq > cur:
		u.max[key] = seq
		u.at[key] = []plumbing.Hash{c}
	case seq == cur && !slices.Contains(u.at[key], c):
		u.at[key] = append(u.at[key], c)
	}
}

// sequenceReader finds the lockfiles a commit wrote that its trailers do
// not name. It keeps no tree (a long history's would be large), only each
// commit's lock folder tree hash, so a commit's is looked up once as the
// commit and once as a parent at most from the object cache.
type sequenceReader struct {
	r         *Repo
	parts     []string // the lock folder's path
	lockTrees map[plumbing.Hash]plumbing.Hash
	// commits are parents read for their lock folder, kept until the
	// walk reaches them.
	commits commitCache
}

func (s *sequenceReader) commit(h plumbing.Hash) (*object.Commit, error) {
	return s.commits.get(s.r, h)
}

// lockTree is the hash of a commit's lock folder (zero: none).
func (s *sequenceReader) lockTree(commit plumbing.Hash) (plumbing.Hash, error) {
	if h, ok := s.lockTrees[commit]; ok {
		return h, nil
	}
	c, err := s.commit(commit)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	cur, err := subtreeOf(c.TreeHash, s.parts, s.entries)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	s.lockTrees[commit] = cur
	return cur, nil
}

func (s *sequenceReader) entries(h plumbing.Hash) ([]object.TreeEntry, error) {
	if h.IsZero() {
		return nil, nil
	}
	t, err := object.GetTree(s.r.storer, h)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	return t.Entries, nil
}

// unnamed notes in u the sequence of every lockfile c wrote (its content
// differs from the same path in every parent) that named does not name.
func (s *sequenceReader) unnamed(c *object.Commit, named map[string]int, u *usedSequences) error {
	cur, err := s.lockTree(c.Hash)
	if err != nil || cur.IsZero() {
		return err
	}
	parents := make([]plumbing.Hash, 0, len(c.ParentHashes))
	for _, p := range c.ParentHashes {
		lt, err := s.lockTree(p)
		if err != nil {
			return err
		}
		if lt == cur {
			return nil // the folder as a parent had it: nothing written here
		}
		parents = append(parents, lt)
	}
	return s.diff(c.Hash, cur, parents, nil, named, u)
}

// diff walks the tree cur of commit c against the same folder of each
// parent (zero: absent), descending only where it differs from all of
// them.
func (s *sequenceReader) diff(c, cur plumbing.Hash, parents []plumbing.Hash, at []string, named map[string]int, u *usedSequences) error {
	entries, err := s.entries(cur)
	if err != nil {
		return err
	}
	byParent := make([]map[string]object.TreeEntry, len(parents))
	for i, p := range parents {
		pe, err := s.entries(p)
		if err != nil {
			return err
		}
		byParent[i] = make(map[string]object.TreeEntry, len(pe))
		for _, e := range pe {
			byParent[i][e.Name] = e
		}
	}
	for _, e := range entries {
		same := false
		var sub []plumbing.Hash
		for _, m := range byParent {
			pe, ok := m[e.Name]
			if ok && pe.Hash == e.Hash && pe.Mode == e.Mode {
				same = true
				break
			}
			if ok && pe.Mode == filemode.Dir {
				sub = append(sub, pe.Hash)
			} else {
				sub = append(sub, plumbing.ZeroHash)
			}
		}
		if same {
			continue
		}
		path := append(at[:len(at):len(at)], e.Name)
		switch {
		case e.Mode == filemode.Dir && len(path) < 3:
			if err := s.diff(c, e.Hash, sub, path, named, u); err != nil {
				return err
			}
		case (e.Mode == filemode.Regular || e.Mode == filemode.Executable) && len(path) == 3:
			// locks/<cluster>/<env>/<name>.lock.yaml
			name, ok := strings.CutSuffix(path[2], ".lock.yaml")
			if !ok || name == "" || strings.HasPrefix(name, ".") {
				continue
			}
			key := path[0] + "/" + path[1] + "/" + name
			if _, ok := named[key]; ok || checkLockKey(key) != nil {
				continue
			}
			seq, _, err := s.lockfileHead(e.Hash)
			if err != nil {
				return err
			}
			u.note(key, seq, c)
		}
	}
	return nil
}

// reused returns the keys of u whose highest sequence was used for more
// than one instance, with that sequence.
func (s *sequenceReader) reused(u *usedSequences) (map[string]int, error) {
	out := map[string]int{}
	for key, commits := range u.at {
		if len(commits) < 2 {
			continue // one commit, one lockfile
		}
		twice, err := s.usedTwice(key, u.max[key], commits)
		if err != nil {
			return nil, err
		}
		if twice {
			out[key] = u.max[key]
		}
	}
	return out, nil
}

// usedTwice reports whether the lockfiles of key that commits hold at
// sequence seq have more than one digest. A commit whose lockfile holds
// another number (a squash merge's body names one its lockfile went past)
// or none says nothing of seq's instance; one blob is one instance.
func (s *sequenceReader) usedTwice(key string, seq int, commits []plumbing.Hash) (bool, error) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 {
		return false, nil
	}
	file := parts[2] + ".lock.yaml"
	blobs := map[plumbing.Hash]bool{}
	for _, c := range commits {
		lt, err := s.lockTree(c)
		if err != nil {
			return false, err
		}
		env, err := subtreeOf(lt, parts[:2], s.entries)
		if err != nil {
			return false, err
		}
		entries, err := s.entries(env)
		if err != nil {
			return false, err
		}
		for _, e := range entries {
			if e.Name == file && (e.Mode == filemode.Regular || e.Mode == filemode.Executable) {
				blobs[e.Hash] = true
			}
		}
	}
	if len(blobs) < 2 {
		return false, nil
	}
	var first string
	for b := range blobs {
		n, digest, err := s.lockfileHead(b)
		if err != nil {
			return false, err
		}
		if n != seq || digest == "" {
			continue
		}
		if first == "" {
			first = digest
		} else if digest != first {
			return true, nil
		}
	}
	return false, nil
}

// lockfileHead reads the top-level sequence and digest of a lockfile
// blob: a sequence of 0 when it has none that parses, a digest of ""
// when it has none (the lockfile is checked where it is loaded; a broken
// one in history cannot be mended, and must not stop a lock).
func (s *sequenceReader) lockfileHead(h plumbing.Hash) (int, string, error) {
	blob, err := object.GetBlob(s.r.storer, h)
	if err != nil {
		return 0, "", s.r.blobError(h, err)
	}
	if blob.Size > maxRelockCompare {
		return 0, "", nil
	}
	rd, err := blob.Reader()
	if err != nil {
		return 0, "", fmt.Errorf("blob %s: %w", h, err)
	}
	defer rd.Close()
	data, err := io.ReadAll(rd)
	if err != nil {
		return 0, "", fmt.Errorf("blob %s: %w", h, err)
	}
	seq, digest, seenSeq := 0, "", false
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("sequence:")); ok && !seenSeq {
			seenSeq = true
			if n, err := parseSequence(string(bytes.TrimSpace(v))); err == nil {
				seq = n
			}
		} else if v, ok := bytes.CutPrefix(line, []byte("digest:")); ok && digest == "" {
			digest = string(bytes.TrimSpace(v))
		}
		if seenSeq && digest != "" {
			break
		}
	}
	return seq, digest, nil
}

// History is what a locker reads of a branch beyond one tree: the
// configuration commits since the last lock, the numbers ever used (and
// those used for two instances), and the trees of those commits.
type History interface {
	UnlockedChanges(head Hash, dir, lockDir string, limit int) (Unlocked, error)
	LockedSequences(head Hash, dir, lockDir string) (map[string]int, error)
	ReusedSequences(head Hash, dir, lockDir string) (map[string]int, error)
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

// bodyLocks reads the Styrmin-Lock lines anywhere in message, as a squash
// merge's body holds them: indented (`git merge --squash`) or after a
// list marker (a forge's "* subject" per squashed commit). Lines that do
// not parse are skipped.
func bodyLocks(message string) map[string]int {
	var out map[string]int
	for line := range strings.Lines(message) {
		line = strings.TrimLeft(line, " \t*-")
		key, value, ok := strings.Cut(line, ":")
		if !ok || !strings.EqualFold(strings.TrimSpace(key), LockTrailer) {
			continue
		}
		k, seq, err := parseLockValue(strings.TrimSpace(value))
		if err != nil {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[k] = max(out[k], seq)
	}
	return out
}

// writtenByCommitLocks reports whether c is a lock commit as CommitLocks
// writes it for locks (styrminctl lock, the agent's lock mode): the
// subject FormatMessage generates for them ("styrmin: lock <key>=<seq>,
// …", or a retry's "styrmin: lock retry <key>=<seq>, …"), a blank line,
// then only the trailers, in FormatMessage's order, and the same author
// and committer (a rebase, a cherry-pick or an amended commit has a
// committer of its own: a fixup may have folded another commit's
// lockfiles into it without its message). Its trailers name every
// lockfile it wrote. A squash merge or a hand-edited message is not.
func writtenByCommitLocks(c *object.Commit, locks map[string]int) bool {
	if c.Author.Name != c.Committer.Name || c.Author.Email != c.Committer.Email || !c.Author.When.Equal(c.Committer.When) {
		return false
	}
	subject, _, ok := strings.Cut(c.Message, "\n")
	if !ok {
		return false
	}
	summary, ok := strings.CutPrefix(subject, "styrmin: lock ")
	if !ok {
		return false
	}
	keys := slices.Sorted(maps.Keys(locks))
	if summary != summarize(keys, locks) && !retrySummary(summary, locks) {
		return false
	}
	var extra []Trailer
	for _, t := range ParseTrailers(c.Message) {
		if !strings.EqualFold(t.Key, LockTrailer) {
			extra = append(extra, t)
		}
	}
	want, err := formatMessage(subject, locks, extra)
	return err == nil && want == c.Message
}

// retrySummary reports whether summary is a retry's: "retry " and every
// lock as <key>=<seq>, in any order (resolver.RetryChange).
func retrySummary(summary string, locks map[string]int) bool {
	rest, ok := strings.CutPrefix(summary, "retry ")
	if !ok {
		return false
	}
	names := strings.Split(rest, ", ")
	if len(names) != len(locks) {
		return false
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		k, v, ok := strings.Cut(n, "=")
		if !ok || seen[k] {
			return false
		}
		seq, found := locks[k]
		if !found || strconv.Itoa(seq) != v {
			return false
		}
		seen[k] = true
	}
	return true
}
