package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/resolver"
)

// headCommit returns the commit the working tree is at, "" outside git.
func headCommit(repo string) string {
	r, err := gitsource.Open(repo, gitsource.OpenOptions{})
	if err != nil {
		return ""
	}
	h, err := r.Head()
	if err != nil {
		return ""
	}
	return h.String()
}

// gitAuthFromEnv reads push credentials from the environment, never from
// flags, so they stay out of shell history and CI logs.
func gitAuthFromEnv() (gitsource.Auth, error) {
	a := gitsource.Auth{Token: os.Getenv("STYRMIN_GIT_TOKEN"), Username: os.Getenv("STYRMIN_GIT_USERNAME")}
	if f := os.Getenv("STYRMIN_GIT_SSH_KEY_FILE"); f != "" {
		key, err := os.ReadFile(f)
		if err != nil {
			return a, fmt.Errorf("STYRMIN_GIT_SSH_KEY_FILE: %w", err)
		}
		a.SSHKey = key
	}
	return a, nil
}

// runLockCommit locks the committed head of the branch (not the worktree's
// uncommitted edits) and commits the lockfiles onto it: locally with
// --commit, on the remote with --push. Each attempt resolves again on the
// head it builds on, so a locker that lost a race renumbers.
func runLockCommit(ctx context.Context, g *globalOptions, o *lockOptions, stdout io.Writer) error {
	opts := gitsource.OpenOptions{Branch: o.branch}
	if o.push {
		auth, err := gitAuthFromEnv()
		if err != nil {
			return err
		}
		opts.Remote, opts.Auth = o.remote, auth
	}
	repo, err := gitsource.Open(g.Repo, opts)
	if err != nil {
		return err
	}
	var last []resolver.LockChange
	var resErr error
	build := func(ctx context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
		ws, err := resolver.LoadWorkspace(headFS, resolver.WorkspaceOptions{SourceCommit: head.String()})
		if err != nil {
			return gitsource.Change{}, err
		}
		changes, _, rerr := ws.Lock(lockPolicy(o))
		if rerr != nil && !o.keepGoing {
			return gitsource.Change{}, rerr
		}
		last, resErr = changes, rerr
		return lockCommitChange(changes), nil
	}
	res, err := repo.CommitLocks(ctx, gitsource.CommitRequest{Build: build, MaxAttempts: o.attempts})
	if err != nil {
		return err
	}
	if !res.Committed {
		fmt.Fprintln(stdout, "nothing to lock: every deployment is at its locked instance")
		return resErr
	}
	for _, c := range last {
		fmt.Fprintf(stdout, "locked %s\n", describeChange(c))
	}
	verb := "committed"
	if o.push {
		verb = "pushed"
	}
	fmt.Fprintf(stdout, "%s %s on %s after %d attempt(s)\n", verb, res.Commit, repo.Branch(), res.Attempts)
	return resErr
}

// lockCommitChange turns lock changes into a gitsource change with one
// Styrmin-Lock trailer per deployment.
func lockCommitChange(changes []resolver.LockChange) gitsource.Change {
	ch := gitsource.Change{Files: map[string][]byte{}, Locks: map[string]int{}}
	for _, c := range changes {
		ch.Files[c.Path()] = c.Data
		ch.Locks[c.ID.String()] = int(c.Next.Sequence)
	}
	return ch
}
