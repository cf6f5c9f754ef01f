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
	// working tree the commit HEAD names when the working tree's
	// configuration is that commit's ("" outside git, or with uncommitted
	// edits: no commit gives that configuration).
	commit string
	// edited reports a working tree whose configuration differs from HEAD.
	edited bool
	// used are the sequences the history of HEAD (for the working tree)
	// or of the revision used (nil outside git).
	used resolver.UsedSequences
	// reused are those of them it used for two instances.
	reused resolver.ReusedSequences
	// unlocked counts the configuration commits since the locks last
	// changed (working tree only; 0 outside git).
	unlocked int
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
	sub, err := repo.Subdir(dir)
	if err != nil {
		return head{}, err
	}
	if rev == "" {
		return workingTree(h, repo, sub)
	}
	r, err := repo.ResolveRevision(rev)
	if err != nil {
		return head{}, err
	}
	fsys, err := repo.TreeAt(r.Commit, sub)
	if err != nil {
		return head{}, err
	}
	// The revision's own history numbers its changes, as HEAD's does the
	// working tree's: a lockfile behind a sequence it used (a revert) is
	// locked again, so plan --head agrees with lock and plan.
	used, reused, err := usedSequences(repo, r.Commit, sub)
	if err != nil {
		return head{}, err
	}
	return head{fsys: fsys, name: r.Name, commit: r.Commit.String(), used: used, reused: reused}, nil
}

// usedSequences are the sequences the history of commit used, for the
// folder sub of repo, and those it used for two instances.
func usedSequences(repo *gitsource.Repo, commit gitsource.Hash, sub string) (resolver.UsedSequences, resolver.ReusedSequences, error) {
	seqs, err := repo.LockedSequences(commit, sub, "locks")
	if err != nil {
		return nil, nil, err
	}
	reused, err := repo.ReusedSequences(commit, sub, "locks")
	if err != nil {
		return nil, nil, err
	}
	return resolver.UsedFromTrailers(seqs), resolver.ReusedFromHistory(reused), nil
}

// workingTree completes h, the working tree at the folder sub of repo:
// the commit it is, the sequences used, the unlocked commits.
func workingTree(h head, repo *gitsource.Repo, sub string) (head, error) {
	c, err := repo.Resolve("HEAD")
	if err != nil || c.IsZero() {
		return h, nil // no commit yet
	}
	same, err := repo.SameFiles(c, sub, h.fsys, resolver.ConfigPaths())
	if err != nil {
		return head{}, err
	}
	if same {
		h.commit = c.String()
	} else {
		h.edited = true
	}
	if h.used, h.reused, err = usedSequences(repo, c, sub); err != nil {
		return head{}, err
	}
	if un, err := repo.UnlockedChanges(c, sub, "locks", resolver.DefaultMaxUnlocked); err == nil && !un.Base.IsZero() {
		h.unlocked = len(un.Commits)
	}
	return h, nil
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
func headWorkspace(ctx context.Context, g *globalOptions) (*resolver.Workspace, head, error) {
	return headWorkspaceWith(ctx, g, func(*resolver.WorkspaceOptions) {})
}

// headWorkspaceWith is headWorkspace with its options changed by set.
func headWorkspaceWith(ctx context.Context, g *globalOptions, set func(*resolver.WorkspaceOptions)) (*resolver.Workspace, head, error) {
	dir := g.Repo
	// The working tree loads while git tells which commit it is and the
	// sequences its history used: both only read, and the workspace needs
	// the answer only when it resolves. git's error comes first, as when
	// it was asked first.
	type headed struct {
		h   head
		err error
	}
	// A git error stops fetching driver sources, which may wait on the
	// network.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hc := make(chan headed, 1)
	go func() {
		h, err := loadHead(dir, "", openRepo(dir))
		if err != nil {
			cancel()
		}
		hc <- headed{h, err}
	}()
	opts := g.workspaceOptions(ctx, desiredStateRemote(dir))
	set(&opts)
	ws, err := resolver.LoadWorkspace(os.DirFS(dir), opts)
	hd := <-hc
	if hd.err != nil {
		return nil, hd.h, hd.err
	}
	if err != nil {
		return nil, hd.h, err
	}
	ws.SetSource(hd.h.commit, hd.h.used, hd.h.reused)
	return ws, hd.h, nil
}
