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

// driverFetcher reads driver versions kept in other git repositories (the
// `drivers` list of styrmin.cue), with the credentials of gitAuthFromEnv,
// and returns the commit each ref resolved to: the lock records it.
func driverFetcher(ctx context.Context) resolver.DriverFetcher {
	return func(src resolver.DriverSource) (fs.FS, string, error) {
		auth, err := gitAuthFromEnv()
		if err != nil {
			return nil, "", err
		}
		fsys, commit, err := gitsource.FetchTree(ctx, src.URL, src.Ref, src.Path, auth)
		if err != nil {
			return nil, "", err
		}
		return fsys, commit.String(), nil
	}
}

// runLockCommit locks the committed head of the branch (not the worktree's
// uncommitted edits) and commits the lockfiles onto it: locally with
// --commit, on the remote with --push. Each attempt resolves again on the
// head it builds on, so a locker that lost a race renumbers.
func runLockCommit(ctx context.Context, g *globalOptions, o *lockOptions, stdout io.Writer) error {
	repo, err := openForCommit(g.Repo, o.branch, o.remote, o.push)
	if err != nil {
		return err
	}
	var retry map[resolver.ID]int64
	if o.retryFailed {
		if retry, err = failedDeployments(ctx, o.newClient, o.kubeconfig); err != nil {
			return err
		}
	}
	dir, err := repo.Subdir(g.Repo)
	if err != nil {
		return err
	}
	out, err := resolver.CommitLocksWith(ctx, repo, g.workspaceOptions(ctx),
		resolver.LockRequest{Policy: lockPolicy(o), AllowDeletions: o.allowDeletions, Retry: retry},
		resolver.CommitOptions{Attempts: o.attempts, Dir: dir, History: repo, Squash: o.squash})
	if err != nil {
		return err
	}
	printNotRetried(stdout, out.NotRetried)
	if !out.Committed {
		fmt.Fprintln(stdout, "nothing to lock: every deployment is at its locked instance")
		return out.Skipped
	}
	for _, c := range out.Changes {
		fmt.Fprintf(stdout, "locked %s\n", describeChange(c))
	}
	printCommitted(stdout, out, repo, o.push)
	return out.Skipped
}
