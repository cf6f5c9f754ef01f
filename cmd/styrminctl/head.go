package main

import (
	"context"
	"io/fs"
	"os"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/resolver"
)

// head is the configuration a command works on.
type head struct {
	fsys fs.FS
	// name describes it in a plan: "working tree", or "REV (short hash)".
	name string
	// commit is recorded in new instances: the revision's commit; for the
	// working tree the head of its branch ("" outside git or on a
	// detached HEAD, as lock has always recorded it).
	commit string
}

// loadHead is the one way plan, diff, lock and explain choose what they
// work on: the working tree at dir, or with rev the tree of that revision
// at the same folder of the repository. repo is the git repository holding
// dir, nil outside git (where only the working tree exists).
func loadHead(dir, rev string, repo *gitsource.Repo) (head, error) {
	h := head{fsys: os.DirFS(dir), name: "working tree"}
	if repo == nil {
		return h, nil
	}
	if c, err := repo.Head(); err == nil {
		h.commit = c.String()
	}
	if rev == "" {
		return h, nil
	}
	sub, err := repo.Subdir(dir)
	if err != nil {
		return head{}, err
	}
	r, err := repo.ResolveRevision(rev)
	if err != nil {
		return head{}, err
	}
	fsys, err := repo.TreeAt(r.Commit, sub)
	if err != nil {
		return head{}, err
	}
	return head{fsys: fsys, name: r.Name, commit: r.Commit.String()}, nil
}

// openRepo opens the git repository holding dir, or returns nil outside
// git: lock and explain work on a plain folder too.
func openRepo(dir string) *gitsource.Repo {
	r, err := gitsource.Open(dir, gitsource.OpenOptions{})
	if err != nil {
		return nil
	}
	return r
}

// headWorkspace loads the working tree (loadHead) with its drivers,
// fetching the driver sources styrmin.cue lists, and its lockfiles: what
// lock and explain resolve.
func headWorkspace(ctx context.Context, dir string) (*resolver.Workspace, error) {
	h, err := loadHead(dir, "", openRepo(dir))
	if err != nil {
		return nil, err
	}
	return resolver.LoadWorkspace(h.fsys, resolver.WorkspaceOptions{SourceCommit: h.commit, FetchDriver: driverFetcher(ctx)})
}
