package gitsource

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Folder is a view of a repository in which one of its folders is the
// root: a desired-state repository kept in a sub-folder of a larger one (a
// monorepo's deploy/). Trees, lock changes, history walks and lock commits
// all speak in paths relative to the folder, so what reads a desired-state
// repository needs no notion of where it sits.
type Folder struct {
	r   *Repo
	dir string // clean, slash-separated; never "."
}

// Compile-time checks that Folder offers what a Repo offers the agent.
var (
	_ Reader  = (*Folder)(nil)
	_ Fetcher = (*Folder)(nil)
	_ Walker  = (*Folder)(nil)
	_ Writer  = (*Folder)(nil)
	_ History = (*Folder)(nil)
)

// InFolder returns the view of r whose root is dir, a clean relative
// slash-separated path ("" or "." is the repository itself).
func (r *Repo) InFolder(dir string) (*Folder, error) {
	dir = strings.Trim(dir, "/")
	if dir == "" {
		dir = "."
	}
	if !fs.ValidPath(dir) {
		return nil, fmt.Errorf("gitsource: folder %q: want a clean relative path such as deploy/styrmin", dir)
	}
	return &Folder{r: r, dir: dir}, nil
}

// Repo is the repository the folder is in.
func (f *Folder) Repo() *Repo { return f.r }

// Dir is the folder, "." for the repository's root.
func (f *Folder) Dir() string { return f.dir }

func (f *Folder) join(p string) string {
	p = strings.Trim(p, "/")
	switch {
	case f.dir == ".":
		if p == "" {
			return "."
		}
		return p
	case p == "" || p == ".":
		return f.dir
	default:
		return path.Join(f.dir, p)
	}
}

// Branch is the tracked branch.
func (f *Folder) Branch() string { return f.r.Branch() }

// RemoteURL is the remote's URL.
func (f *Folder) RemoteURL() string { return f.r.RemoteURL() }

// Head returns the tracked branch head.
func (f *Folder) Head() (Hash, error) { return f.r.Head() }

// Fetch updates the tracked branch.
func (f *Folder) Fetch(ctx context.Context) (FetchResult, error) { return f.r.Fetch(ctx) }

// Resolve resolves a revision to a commit.
func (f *Folder) Resolve(rev string) (Hash, error) { return f.r.Resolve(rev) }

// Message returns a commit's message.
func (f *Folder) Message(commit Hash) (string, error) { return f.r.Message(commit) }

// Commit is Repo.Commit.
func (f *Folder) Commit(commit Hash) (CommitInfo, error) { return f.r.Commit(commit) }

// FS is the folder of commit's tree.
func (f *Folder) FS(commit Hash) (fs.FS, error) { return f.r.TreeAt(commit, f.dir) }

// TreeAt is the folder sub below the folder, at commit.
func (f *Folder) TreeAt(commit Hash, sub string) (fs.FS, error) {
	return f.r.TreeAt(commit, f.join(sub))
}

// LockChanges lists the changes under prefix (relative to the folder),
// with paths relative to the folder.
func (f *Folder) LockChanges(from, to Hash, prefix string) ([]LockChange, error) {
	changes, err := f.r.LockChanges(from, to, f.join(prefix))
	if err != nil || f.dir == "." {
		return changes, err
	}
	for i := range changes {
		changes[i].Path = strings.TrimPrefix(changes[i].Path, f.dir+"/")
	}
	return changes, nil
}

// UnlockedChanges is Repo.UnlockedChanges for sub below the folder.
func (f *Folder) UnlockedChanges(head Hash, sub, lockDir string, limit int) (Unlocked, error) {
	return f.r.UnlockedChanges(head, f.join(sub), lockDir, limit)
}

// LockedSequences is Repo.LockedSequences for sub below the folder.
func (f *Folder) LockedSequences(head Hash, sub, lockDir string) (map[string]int, error) {
	return f.r.LockedSequences(head, f.join(sub), lockDir)
}

// ReusedSequences is Repo.ReusedSequences for sub below the folder.
func (f *Folder) ReusedSequences(head Hash, sub, lockDir string) (map[string]int, error) {
	return f.r.ReusedSequences(head, f.join(sub), lockDir)
}

// CommitLocks commits with the request's Dir taken below the folder.
func (f *Folder) CommitLocks(ctx context.Context, req CommitRequest) (CommitResult, error) {
	req.Dir = f.join(req.Dir)
	return f.r.CommitLocks(ctx, req)
}

// Descends is Repo.Descends: commits are the whole repository's.
func (f *Folder) Descends(head, from Hash) (bool, error) { return f.r.Descends(head, from) }

// Holds is Repo.Holds: the branch is the whole repository's.
func (f *Folder) Holds(commit Hash) (bool, error) { return f.r.Holds(commit) }
