package gitsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/storage"
)

// Signature names the author and committer of lock commits.
type Signature struct {
	Name  string
	Email string
}

// The author of lock commits when CommitRequest.Author is empty.
const (
	DefaultAuthorName  = "styrmin"
	DefaultAuthorEmail = "styrmin@localhost"
)

// Change is what one attempt of CommitLocks writes.
type Change struct {
	// Files maps a slash-separated path from the repository root to its new
	// content; a nil value deletes the file. Directories left empty
	// disappear. A path must be clean and relative, and must not name or go
	// through .git, an existing directory or an existing file used as a
	// directory.
	Files map[string][]byte
	// Summary ends the subject line "styrmin: lock <summary>"; empty
	// generates one from Locks.
	Summary string
	// Subject, when set, is the whole subject line instead (Summary is
	// then unused): a commit that edits configuration, not locks, such as
	// `styrminctl upgrade --commit`, must not read as a lock commit.
	Subject string
	// Locks become the Styrmin-Lock trailers: deployment key → sequence.
	Locks map[string]int
	// Trailers are extra trailers (for example the source commit).
	Trailers []Trailer
}

// BuildFunc computes the change to commit on top of head, whose tree is
// headFS (head is zero and headFS empty when the branch does not exist yet).
// It runs once per attempt, on the newest head: this is where the caller
// resolves again and renumbers sequences. It must not keep headFS.
type BuildFunc func(ctx context.Context, head Hash, headFS fs.FS) (Change, error)

// ChainFunc is BuildFunc for a chain of commits: each change becomes one
// commit on top of the one before, and the branch moves to the last in
// one compare-and-swap (so a chain lands whole or not at all). Changes
// that leave the tree as it is make no commit.
type ChainFunc func(ctx context.Context, head Hash, headFS fs.FS) ([]Change, error)

// Backoff bounds the pause between attempts: attempt n waits a random
// duration in [d/2, d] with d = min(Initial·2^(n-1), Max), so that racing
// lockers spread out.
type Backoff struct {
	Initial time.Duration // default 100ms
	Max     time.Duration // default 2s
}

// CommitRequest configures CommitLocks.
type CommitRequest struct {
	// Build computes the change; Build or Chain is required.
	Build BuildFunc
	// Chain computes several commits instead (see ChainFunc); it wins over
	// Build.
	Chain ChainFunc
	// Dir is the folder of the repository that Build and Chain see as
	// their root (a desired-state repository kept in a sub-folder of a
	// larger one): headFS is that folder of the head's tree and the paths
	// of Change.Files are relative to it. Empty or "." is the root.
	Dir string
	// Author authors and commits; default DefaultAuthorName and
	// DefaultAuthorEmail.
	Author Signature
	// Sign signs each commit (its gpgsig header); nil for unsigned
	// commits. Repo.Identity chooses both as git does.
	Sign SignFunc
	// MaxAttempts bounds the attempts when the branch keeps moving;
	// default 5.
	MaxAttempts int
	// Backoff spaces the attempts; zero fields take the defaults.
	Backoff Backoff
	// ExistingBranch refuses a branch that does not exist (a zero head)
	// with a *BranchNotFoundError, instead of calling Build on an empty
	// tree and creating the branch: a branch named by mistake would
	// otherwise be a valid, empty place to commit to.
	ExistingBranch bool
}

// CommitResult reports what CommitLocks did.
type CommitResult struct {
	// Commit is the new commit, or the head when there was nothing to
	// commit.
	Commit Hash
	// Parent is the head the last attempt built on (zero for a new branch).
	Parent Hash
	// Committed is false when the change left the tree as it was.
	Committed bool
	// Commits are the commits made, oldest first (one for Build; one per
	// change that changed the tree for Chain); Commit is the last.
	Commits []Hash
	// Attempts counts the attempts made (Build calls).
	Attempts int
}

const (
	defaultMaxAttempts = 5
	defaultBackoffInit = 100 * time.Millisecond
	defaultBackoffMax  = 2 * time.Second
)

// CommitLocks commits a change onto the tracked branch with compare and
// swap, retrying while the branch moves under it.
//
// Each attempt takes the current head (remote mode: fetched from the
// remote; local mode: the local branch), calls Build on it, writes the
// commit's objects directly (no worktree, no index) and moves the branch
// from that head to the new commit only if it is still at that head:
//
//   - remote mode: a push of head→commit without force; the remote applies
//     it only while the branch is at head. After a push the remote-tracking
//     ref is at the new commit; the local branch and worktree are not
//     touched.
//   - local mode: a compare-and-swap of the branch ref. When the branch is
//     checked out in a worktree, the changed files and their index entries
//     are updated too, so `git status` stays clean; a changed path with
//     uncommitted changes is refused beforehand with ErrDirtyWorktree.
//
// If the branch moved, the attempt backs off with jitter and starts again
// (Build sees the new head). A push the remote refused while its branch
// stayed at that head (another push held the branch's lock) is tried so
// once more; refused again, it is returned. Any other failure (Build's
// error, bad paths, a network or authentication error) returns at once. When every attempt
// found the branch moved, the error wraps ErrConflict. A change that leaves
// the tree as it is makes no commit and returns the head.
//
// The commit message is FormatMessage(Summary, Locks, Trailers), or
// Subject with the same trailers.
func (r *Repo) CommitLocks(ctx context.Context, req CommitRequest) (CommitResult, error) {
	chain := req.Chain
	if chain == nil && req.Build != nil {
		build := req.Build
		chain = func(ctx context.Context, head Hash, headFS fs.FS) ([]Change, error) {
			ch, err := build(ctx, head, headFS)
			return []Change{ch}, err
		}
	}
	if chain == nil {
		return CommitResult{}, errors.New("gitsource: commit locks: CommitRequest.Build is nil")
	}
	dir := strings.Trim(req.Dir, "/")
	if dir == "" {
		dir = "."
	}
	if !fs.ValidPath(dir) {
		return CommitResult{}, fmt.Errorf("gitsource: commit locks: folder %q is not a clean relative path", req.Dir)
	}
	if err := r.requireBranch("commit locks"); err != nil {
		return CommitResult{}, err
	}
	author := req.Author
	if author.Name == "" && author.Email == "" {
		author = Signature{Name: DefaultAuthorName, Email: DefaultAuthorEmail}
	}
	if strings.ContainsAny(author.Name+author.Email, "<>\n") {
		return CommitResult{}, fmt.Errorf("gitsource: commit locks: author %q <%s> contains '<', '>' or a newline", author.Name, author.Email)
	}
	maxAttempts := req.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = defaultMaxAttempts
	}
	bo := req.Backoff
	if bo.Initial <= 0 {
		bo.Initial = defaultBackoffInit
	}
	if bo.Max <= 0 {
		bo.Max = defaultBackoffMax
	}

	var res CommitResult
	refusedOnce := false
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			if err := sleep(ctx, bo.delay(attempt-1)); err != nil {
				return res, fmt.Errorf("gitsource: commit locks on %s: %w", r.branch, err)
			}
		}
		res.Attempts = attempt
		done, err := r.attempt(ctx, chain, dir, author, req.Sign, req.ExistingBranch, &res)
		var ru *refusedUnmoved
		if errors.As(err, &ru) && !refusedOnce && attempt < maxAttempts {
			// Another push may have held the branch's lock (git refuses
			// a ref it cannot lock, and the branch moves only once that
			// push ends): tried again once, built on the head then. A
			// refusal that stands (a hook, a protected branch) is
			// refused again and returned.
			refusedOnce = true
			continue
		}
		if err != nil || done {
			return res, err
		}
	}
	return res, fmt.Errorf("gitsource: commit locks on %s: the branch moved on each of %d attempts: %w", r.branch, maxAttempts, ErrConflict)
}

// attempt runs one compare-and-swap attempt. done is false when the branch
// moved and the caller should retry.
func (r *Repo) attempt(ctx context.Context, build ChainFunc, dir string, author Signature, sign SignFunc, existing bool, res *CommitResult) (done bool, err error) {
	head, err := r.currentHead(ctx)
	if err != nil {
		return true, err
	}
	if head.IsZero() && existing {
		return true, &BranchNotFoundError{Remote: r.remoteName, URL: r.RemoteURL(), Branch: r.branch, Upstream: r.upstream}
	}
	res.Parent, res.Commit, res.Committed, res.Commits = head, head, false, nil

	headFS, err := r.TreeAt(head, dir)
	if err != nil {
		return true, err
	}
	changes, err := build(ctx, head, headFS)
	if err != nil {
		return true, fmt.Errorf("gitsource: commit locks on %s: build on %s: %w", r.branchName(), head, err)
	}
	msgs := make([]string, len(changes))
	for i, ch := range changes {
		if ch.Subject != "" {
			msgs[i], err = formatMessage(ch.Subject, ch.Locks, ch.Trailers)
		} else {
			msgs[i], err = FormatMessage(ch.Summary, ch.Locks, ch.Trailers)
		}
		if err != nil {
			return true, fmt.Errorf("gitsource: commit locks: %w", err)
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	staged := newStagedObjects(r.storer)
	tb := &treeBuilder{s: staged, old: map[string]object.TreeEntry{}}
	tree := plumbing.ZeroHash
	if !head.IsZero() {
		c, err := object.GetCommit(r.storer, head.plumbing())
		if err != nil {
			return true, fmt.Errorf("gitsource: commit locks: head %s: %w", head, err)
		}
		tree = c.TreeHash
	}
	now := time.Now()
	sig := object.Signature{Name: author.Name, Email: author.Email, When: now}
	parent := head
	var commits []Hash
	written := map[string][]byte{}
	for i, change := range changes {
		files := change.Files
		if dir != "." {
			files = make(map[string][]byte, len(change.Files))
			for p, data := range change.Files {
				files[dir+"/"+p] = data
			}
		}
		newTree, err := tb.apply(tree, files)
		if err != nil {
			return true, fmt.Errorf("gitsource: commit locks: %w", err)
		}
		if newTree == tree {
			continue // this change is already there
		}
		maps.Copy(written, files)
		commit := &object.Commit{Author: sig, Committer: sig, Message: msgs[i], TreeHash: newTree}
		if !parent.IsZero() {
			commit.ParentHashes = []plumbing.Hash{parent.plumbing()}
		}
		if sign != nil {
			if commit.PGPSignature, err = signCommit(r.storer, commit, sign); err != nil {
				return true, fmt.Errorf("gitsource: commit locks: %w", err)
			}
		}
		obj := staged.NewEncodedObject()
		if err := commit.Encode(obj); err != nil {
			return true, fmt.Errorf("gitsource: commit locks: encode commit: %w", err)
		}
		ch, err := staged.SetEncodedObject(obj)
		if err != nil {
			return true, fmt.Errorf("gitsource: commit locks: store commit: %w", err)
		}
		tb.created = append(tb.created, ch)
		tree, parent = newTree, fromPlumbing(ch)
		commits = append(commits, parent)
	}
	if len(commits) == 0 {
		return true, nil // nothing to commit
	}

	wt := r.checkedOutWorktree()
	if wt != nil {
		// Before the check: the index it reads is the one the update
		// replaces, whatever git runs meanwhile.
		release, err := wt.lockIndex()
		if err != nil {
			return true, err
		}
		defer release()
		if err := wt.checkClean(written, tb.old); err != nil {
			return true, err
		}
	}
	if err := staged.flush(); err != nil {
		return true, fmt.Errorf("gitsource: commit locks: %w", err)
	}

	if r.remoteName == "" {
		moved, err := r.casLocalRef(head, parent)
		if err != nil || moved {
			return !moved, err
		}
	} else {
		moved, err := r.push(ctx, head, parent, tb.created)
		if err != nil || moved {
			return !moved, err
		}
	}
	res.Commit, res.Committed, res.Commits = parent, true, commits

	if wt != nil {
		if err := wt.update(written); err != nil {
			return true, fmt.Errorf("gitsource: commit locks: commit %s is on %s but updating the worktree failed (restore it with `git checkout HEAD -- <paths>`): %w", parent, r.branch, err)
		}
	}
	return true, nil
}

// branchName names the tracked branch in messages: "origin/main" in remote
// mode, "main" in local mode.
func (r *Repo) branchName() string {
	if r.remoteName == "" {
		return r.branch
	}
	return r.remoteName + "/" + r.branch
}

// currentHead returns the head an attempt builds on: fetched from the
// remote, or the local branch. Zero means the branch does not exist yet.
func (r *Repo) currentHead(ctx context.Context) (Hash, error) {
	if r.remoteName == "" {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.refHash(r.trackingRef())
	}
	_, head, err := r.fetch(ctx)
	return head, err
}

// casLocalRef moves the local branch from old to new if it is still at old.
func (r *Repo) casLocalRef(old, new Hash) (moved bool, err error) {
	name := r.trackingRef()
	var oldRef *plumbing.Reference
	if !old.IsZero() {
		oldRef = plumbing.NewHashReference(name, old.plumbing())
	} else if cur, err := r.refHash(name); err != nil {
		return false, err
	} else if !cur.IsZero() {
		return true, nil // the branch was created meanwhile
	}
	unlock, err := r.lockRef(name)
	if err != nil {
		return false, err
	}
	defer unlock()
	err = r.storer.CheckAndSetReference(plumbing.NewHashReference(name, new.plumbing()), oldRef)
	if errors.Is(err, storage.ErrReferenceHasChanged) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("gitsource: commit locks: update %s: %w", name, err)
	}
	return false, nil
}

// push sends new (built on old) to the tracked branch of the remote as a
// compare-and-swap: the ref update names old, and the remote applies it
// only while the branch is still there. objs are the objects the remote may
// lack: everything the commit added. moved reports that the branch was not
// at old.
//
// It runs under r.mu, held by attempt from writing the commit to moving
// the tracking ref: go-git reads the objects it sends from the storer,
// which is not safe for concurrent use, and an attempt is kept whole
// against another attempt and a fetch's writes (a fetch leaves the ref
// a push moved since it began: moveTracking). Readers wait for it, so it is
// bounded by the network timeout.
// pushCheckTimeout bounds push's look at the remote branch after a failed
// ReceivePack.
const pushCheckTimeout = 30 * time.Second

func (r *Repo) push(ctx context.Context, old, new Hash, objs []plumbing.Hash) (moved bool, err error) {
	ctx, cancel := networkContext(ctx, r.timeout)
	defer cancel()
	branchRef := plumbing.NewBranchReferenceName(r.branch)
	sess, err := r.session(ctx, true)
	if err != nil {
		return false, err
	}
	defer func() { err = errors.Join(err, closeSession(sess)) }()
	rps := sess.(transport.ReceivePackSession)

	ar, err := rps.AdvertisedReferencesContext(ctx)
	if err != nil {
		return false, transportError("push to", r.remoteURL, err)
	}
	cur, err := advertisedHash(ar, branchRef)
	if err != nil {
		return false, fmt.Errorf("gitsource: push to %s: %w", redactURL(r.remoteURL), err)
	}
	if cur != old.plumbing() {
		return true, nil
	}

	var pack bytes.Buffer
	slices.SortFunc(objs, func(a, b plumbing.Hash) int { return bytes.Compare(a[:], b[:]) })
	objs = slices.Compact(objs)
	if _, err := packfile.NewEncoder(&pack, r.storer, false).Encode(objs, 0); err != nil {
		return false, fmt.Errorf("gitsource: push to %s: encode pack: %w", redactURL(r.remoteURL), err)
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(ar.Capabilities)
	req.Commands = []*packp.Command{{Name: branchRef, Old: old.plumbing(), New: new.plumbing()}}
	req.Packfile = io.NopCloser(&pack)

	rs, pushErr := rps.ReceivePack(ctx, req)
	// The remote's report refuses the update (go-git may also return
	// that refusal as ReceivePack's error), as against a failed connection.
	refused := rs != nil && rs.Error() != nil
	if pushErr == nil && rs != nil {
		pushErr = rs.Error()
	}
	if pushErr == nil {
		return false, r.pushed(new)
	}
	// The remote refused or the connection failed. Decide by what the
	// branch is now, not by parsing messages: at new means the push landed,
	// elsewhere than old means another locker won. The check has its own
	// deadline: ctx may be the one that expired during ReceivePack, after
	// the remote had applied the update.
	checkCtx, cancelCheck := context.WithTimeout(context.WithoutCancel(ctx), pushCheckTimeout)
	defer cancelCheck()
	now, err := r.lsRemote(checkCtx, "list refs of")
	if err != nil {
		// The remote may hold new: a run again finds it there (its
		// branch's head) and commits nothing again.
		return false, fmt.Errorf("%w\nwhether %s holds commit %s is unknown (its answer was lost and its branch could not be read after): run again, a lock it holds is not made twice",
			errors.Join(transportError("push to", r.remoteURL, pushErr), err), redactURL(r.remoteURL), new.Short())
	}
	switch now {
	case new.plumbing():
		return false, r.pushed(new)
	case old.plumbing():
		err := transportError("push to", r.remoteURL, pushErr)
		if refused {
			return false, &refusedUnmoved{err: err}
		}
		return false, err
	default:
		return true, nil
	}
}

// refusedUnmoved is a push the remote refused while its branch stayed at
// the head the push was built on: a refusal that stands (a hook, a
// protected branch), or another push holding the branch's lock, which
// moves it a moment later (git-receive-pack refuses a ref it cannot lock
// within 100 ms). CommitLocks tries such a push once more.
type refusedUnmoved struct{ err error }

func (e *refusedUnmoved) Error() string { return e.err.Error() }
func (e *refusedUnmoved) Unwrap() error { return e.err }

// pushed records that the remote branch is now at h.
func (r *Repo) pushed(h Hash) error {
	if err := r.storer.SetReference(plumbing.NewHashReference(r.trackingRef(), h.plumbing())); err != nil {
		return fmt.Errorf("gitsource: update %s: %w", r.trackingRef(), err)
	}
	return r.syncOwnBranch(h)
}

// lsRemote returns the remote's head of the tracked branch (zero if absent).
// op names the operation in errors. It reads no repository state: the
// caller need not hold r.mu.
func (r *Repo) lsRemote(ctx context.Context, op string) (plumbing.Hash, error) {
	sess, err := r.session(ctx, false)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer func() { _ = closeSession(sess) }()
	ar, err := sess.(transport.UploadPackSession).AdvertisedReferencesContext(ctx)
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, transportError(op, r.remoteURL, err)
	}
	return advertisedHash(ar, plumbing.NewBranchReferenceName(r.branch))
}

// session opens a receive-pack (push) or upload-pack session to the
// remote. Opening it takes no context in go-git: ctx's deadline bounds it
// (and, over ssh, the connection's whole life) through sshDeadline.
func (r *Repo) session(ctx context.Context, receive bool) (any, error) {
	ep, err := transport.NewEndpoint(r.remoteURL)
	if err != nil {
		return nil, fmt.Errorf("gitsource: remote URL %s: %w", redactURL(r.remoteURL), urlError(r.remoteURL, err))
	}
	ep.CaBundle = r.caBundle
	ep.InsecureSkipTLS = r.insecure
	ep.Proxy = sshDeadline(ctx, r.remoteURL)
	cl, err := client.NewClient(ep)
	if err != nil {
		return nil, fmt.Errorf("gitsource: remote %s: %w", redactURL(r.remoteURL), err)
	}
	var sess any
	if receive {
		sess, err = cl.NewReceivePackSession(ep, r.authMethod())
	} else {
		sess, err = cl.NewUploadPackSession(ep, r.authMethod())
	}
	if err != nil {
		return nil, transportError("connect to", r.remoteURL, err)
	}
	return sess, nil
}

func closeSession(s any) error {
	if c, ok := s.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func advertisedHash(ar *packp.AdvRefs, name plumbing.ReferenceName) (plumbing.Hash, error) {
	refs, err := ar.AllReferences()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	ref, err := refs.Reference(name)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return ref.Hash(), nil
}

func (b Backoff) delay(retry int) time.Duration {
	d := b.Max
	if retry < 32 {
		if x := b.Initial << (retry - 1); x > 0 && x < b.Max {
			d = x
		}
	}
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// treeBuilder writes the trees and blobs of a change on top of a base tree.
type treeBuilder struct {
	s       storage.Storer
	created []plumbing.Hash
	// old records the base tree's entry for each changed path (zero Hash
	// when absent), for the worktree check.
	old map[string]object.TreeEntry
}

// changeNode is one directory level of a Change.
type changeNode struct {
	files map[string][]byte // nil value: delete
	dirs  map[string]*changeNode
}

// apply returns the root tree of base with files applied. It validates
// every path before writing anything.
func (b *treeBuilder) apply(base plumbing.Hash, files map[string][]byte) (plumbing.Hash, error) {
	root := &changeNode{}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if err := checkChangePath(p); err != nil {
			return plumbing.ZeroHash, err
		}
		parts := strings.Split(p, "/")
		n := root
		for i, part := range parts[:len(parts)-1] {
			if _, clash := n.files[part]; clash {
				return plumbing.ZeroHash, fmt.Errorf("%w %q: %q is also written as a file", ErrInvalidPath, p, strings.Join(parts[:i+1], "/"))
			}
			if n.dirs == nil {
				n.dirs = map[string]*changeNode{}
			}
			if n.dirs[part] == nil {
				n.dirs[part] = &changeNode{}
			}
			n = n.dirs[part]
		}
		last := parts[len(parts)-1]
		if _, clash := n.dirs[last]; clash {
			return plumbing.ZeroHash, fmt.Errorf("%w %q: also used as a directory by another path", ErrInvalidPath, p)
		}
		if n.files == nil {
			n.files = map[string][]byte{}
		}
		n.files[last] = files[p]
	}
	h, changed, err := b.applyNode(base, root, "")
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if !changed {
		return base, nil
	}
	if h.IsZero() { // everything was deleted: the empty tree
		return b.writeTree(nil)
	}
	return h, nil
}

// applyNode returns the new hash of tree base (zero: the tree is now empty).
func (b *treeBuilder) applyNode(base plumbing.Hash, n *changeNode, dir string) (plumbing.Hash, bool, error) {
	var entries []object.TreeEntry
	if !base.IsZero() {
		t, err := object.GetTree(b.s, base)
		if err != nil {
			return plumbing.ZeroHash, false, fmt.Errorf("read tree %s: %w", dir, err)
		}
		entries = slices.Clone(t.Entries)
	}
	index := func(name string) int {
		return slices.IndexFunc(entries, func(e object.TreeEntry) bool { return e.Name == name })
	}
	changed := false
	for _, name := range slices.Sorted(maps.Keys(n.files)) {
		p := joinPath(dir, name)
		content := n.files[name]
		i := index(name)
		mode := filemode.Regular
		if i >= 0 {
			e := entries[i]
			if _, seen := b.old[p]; !seen { // a chain: keep the head's entry
				b.old[p] = e
			}
			switch e.Mode {
			case filemode.Dir:
				return plumbing.ZeroHash, false, fmt.Errorf("%w %q: is a directory", ErrInvalidPath, p)
			case filemode.Executable:
				mode = filemode.Executable
			}
		} else if _, seen := b.old[p]; !seen {
			b.old[p] = object.TreeEntry{}
		}
		if content == nil {
			if i >= 0 {
				entries = slices.Delete(entries, i, i+1)
				changed = true
			}
			continue
		}
		h, err := b.writeBlob(content)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		if i >= 0 {
			if entries[i].Hash == h && entries[i].Mode == mode {
				continue
			}
			entries[i].Hash, entries[i].Mode = h, mode
		} else {
			entries = append(entries, object.TreeEntry{Name: name, Mode: mode, Hash: h})
		}
		changed = true
	}
	for _, name := range slices.Sorted(maps.Keys(n.dirs)) {
		p := joinPath(dir, name)
		i := index(name)
		child := plumbing.ZeroHash
		if i >= 0 {
			if entries[i].Mode != filemode.Dir {
				return plumbing.ZeroHash, false, fmt.Errorf("%w: %q is a file, not a directory", ErrInvalidPath, p)
			}
			child = entries[i].Hash
		}
		h, childChanged, err := b.applyNode(child, n.dirs[name], p)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		if !childChanged {
			continue
		}
		changed = true
		switch {
		case h.IsZero() && i >= 0:
			entries = slices.Delete(entries, i, i+1)
		case h.IsZero():
		case i >= 0:
			entries[i].Hash = h
		default:
			entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h})
		}
	}
	if !changed {
		return base, false, nil
	}
	if len(entries) == 0 {
		return plumbing.ZeroHash, true, nil
	}
	h, err := b.writeTree(entries)
	return h, true, err
}

func (b *treeBuilder) writeTree(entries []object.TreeEntry) (plumbing.Hash, error) {
	t := &object.Tree{Entries: entries}
	slices.SortFunc(t.Entries, func(x, y object.TreeEntry) int {
		// git orders directories as if their name ended in "/".
		nx, ny := x.Name, y.Name
		if x.Mode == filemode.Dir {
			nx += "/"
		}
		if y.Mode == filemode.Dir {
			ny += "/"
		}
		return strings.Compare(nx, ny)
	})
	obj := b.s.NewEncodedObject()
	if err := t.Encode(obj); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("encode tree: %w", err)
	}
	h, err := b.s.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("store tree: %w", err)
	}
	b.created = append(b.created, h)
	return h, nil
}

func (b *treeBuilder) writeBlob(content []byte) (plumbing.Hash, error) {
	obj := b.s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(content)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(content); err != nil {
		_ = w.Close()
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	h, err := b.s.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("store blob: %w", err)
	}
	b.created = append(b.created, h)
	return h, nil
}

func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// checkChangePath accepts clean, relative, slash-separated paths that stay
// out of .git.
func checkChangePath(p string) error {
	if p == "." || !fs.ValidPath(p) {
		return fmt.Errorf("%w %q: want a clean relative path such as locks/c/e/app.lock.yaml", ErrInvalidPath, p)
	}
	for _, part := range strings.Split(p, "/") {
		if strings.EqualFold(strings.TrimRight(part, ". "), ".git") {
			return fmt.Errorf("%w %q: must not touch .git", ErrInvalidPath, p)
		}
		for _, r := range part {
			if r < 0x20 || r == 0x7f || r == '\\' {
				return fmt.Errorf("%w %q: contains %q", ErrInvalidPath, p, r)
			}
		}
	}
	return nil
}

// signCommit signs the commit's encoding without a signature, as git
// does.
func signCommit(s storage.Storer, c *object.Commit, sign SignFunc) (string, error) {
	obj := s.NewEncodedObject()
	if err := c.EncodeWithoutSignature(obj); err != nil {
		return "", fmt.Errorf("encode commit: %w", err)
	}
	rd, err := obj.Reader()
	if err != nil {
		return "", err
	}
	defer rd.Close()
	payload, err := io.ReadAll(rd)
	if err != nil {
		return "", err
	}
	return sign(payload)
}
