package gitsource

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
)

// Revision is a commit chosen for a comparison, with how to name it in
// messages.
type Revision struct {
	// Commit is the zero Hash when there is no commit (a repository
	// without commits has nothing to compare with).
	Commit Hash
	// Name says how the commit was chosen, with its short hash:
	// "main (0123456789ab)", "HEAD (…)", "merge base with origin/main (…)";
	// "" for no commit.
	Name string
}

// Subdir returns where dir is inside the repository's worktree, as a
// slash-separated path ("." for the root, and for a bare or in-memory
// repository), so that the trees of commits can be read at the same place
// as the working copy. Symbolic links in both paths are resolved first.
func (r *Repo) Subdir(dir string) (string, error) {
	root := r.WorktreeDir()
	if root == "" {
		return ".", nil
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("gitsource: worktree %s: %w", root, err)
	}
	realRoot, err := filepath.EvalSymlinks(absRoot)
	if err != nil {
		return "", fmt.Errorf("gitsource: worktree %s: %w", root, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("gitsource: %s: %w", dir, err)
	}
	realDir, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("gitsource: %s: %w", dir, err)
	}
	rel, err := filepath.Rel(realRoot, realDir)
	if err != nil {
		return "", fmt.Errorf("gitsource: %s inside the worktree %s: %w", dir, root, err)
	}
	return filepath.ToSlash(rel), nil
}

// TreeAt returns the folder sub (as Subdir gives it) of commit's tree; the
// zero Hash gives the empty tree.
func (r *Repo) TreeAt(commit Hash, sub string) (fs.FS, error) {
	fsys, err := r.FS(commit)
	if err != nil {
		return nil, err
	}
	if sub == "." {
		return fsys, nil
	}
	// The folder's own tree, which reads as the whole one does (fs.Sub's
	// wrapper hides ReadFileUpTo); where sub is no folder, fs.Sub's
	// errors.
	if t, ok := fsys.(*treeFS).subtree(sub); ok {
		return t, nil
	}
	return fs.Sub(fsys, sub)
}

// ResolveRevision resolves rev like Resolve and names it "rev (short hash)".
func (r *Repo) ResolveRevision(rev string) (Revision, error) {
	h, err := r.Resolve(rev)
	if err != nil {
		return Revision{}, err
	}
	return Revision{Commit: h, Name: fmt.Sprintf("%s (%s)", rev, h.Short())}, nil
}

// ResolveBase chooses the commit a change is compared with: rev when it is
// given; else the merge base of HEAD and the upstream of the current
// branch (what a pull request is compared with); else HEAD. A repository
// without commits gives the zero Revision: nothing to compare with.
func (r *Repo) ResolveBase(rev string) (Revision, error) {
	if rev != "" {
		return r.ResolveRevision(rev)
	}
	head, err := r.Resolve("HEAD")
	if err != nil {
		// No commit yet: nothing is locked.
		return Revision{}, nil
	}
	mb, upstream, err := r.UpstreamMergeBase()
	if err != nil {
		return Revision{}, err
	}
	if upstream == "" {
		return Revision{Commit: head, Name: fmt.Sprintf("HEAD (%s)", head.Short())}, nil
	}
	return Revision{Commit: mb, Name: fmt.Sprintf("merge base with %s (%s)", upstream, mb.Short())}, nil
}

// UpstreamMergeBase returns the merge base of HEAD and the upstream of the
// current branch (branch.<name>.remote and .merge in the git config), and
// the upstream's short name ("origin/main"). The upstream is "" when HEAD
// is detached, the branch has no upstream or the upstream was never
// fetched. HEAD and an upstream without a common commit give an error
// wrapping ErrNoMergeBase.
func (r *Repo) UpstreamMergeBase() (base Hash, upstream string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gr := r.repo
	head, err := gr.Head()
	if err != nil || !head.Name().IsBranch() {
		return Hash{}, "", nil
	}
	cfg, err := gr.Config()
	if err != nil {
		return Hash{}, "", fmt.Errorf("gitsource: read the git config: %w", err)
	}
	b, ok := cfg.Branches[head.Name().Short()]
	if !ok || b.Remote == "" || b.Merge == "" {
		return Hash{}, "", nil
	}
	up := b.Merge
	if b.Remote != "." {
		up = plumbing.NewRemoteReferenceName(b.Remote, b.Merge.Short())
	}
	ref, err := gr.Reference(up, true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return Hash{}, "", nil
	}
	if err != nil {
		return Hash{}, "", fmt.Errorf("gitsource: read %s: %w", up, err)
	}
	hc, err := gr.CommitObject(head.Hash())
	if err != nil {
		return Hash{}, "", r.commitError(fromPlumbing(head.Hash()), err)
	}
	uc, err := gr.CommitObject(ref.Hash())
	if err != nil {
		return Hash{}, "", r.commitError(fromPlumbing(ref.Hash()), err)
	}
	bases, err := hc.MergeBase(uc)
	if errors.Is(err, plumbing.ErrObjectNotFound) && r.shallow() {
		return Hash{}, "", fmt.Errorf("merge base of HEAD and %s: %w", up.Short(), ErrShallow)
	}
	if err != nil {
		return Hash{}, "", fmt.Errorf("merge base of HEAD and %s: %w", up.Short(), err)
	}
	if len(bases) == 0 && r.shallow() {
		return Hash{}, "", fmt.Errorf("HEAD and its upstream %s have %w in this clone: %w", up.Short(), ErrNoMergeBase, ErrShallow)
	}
	if len(bases) == 0 {
		return Hash{}, "", fmt.Errorf("HEAD and its upstream %s have %w", up.Short(), ErrNoMergeBase)
	}
	return fromPlumbing(bases[0].Hash), up.Short(), nil
}
