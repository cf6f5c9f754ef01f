package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

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
// `drivers` list of styrmin.cue) and returns the commit each ref resolved
// to: the lock records it. The credentials of gitAuthFromEnv go only to a
// driver repository on the protocol, host and port of repoURL, the
// desired-state repository's remote ("" when it has none: then to no
// host), and a token never goes over plain http
// (gitsource.CredentialsFor): styrmin.cue may name any URL, and whoever
// can change it must not be able to collect the token.
func driverFetcher(ctx context.Context, repoURL string) resolver.DriverFetcher {
	return func(src resolver.DriverSource) (fs.FS, string, error) {
		env, err := gitAuthFromEnv()
		if err != nil {
			return nil, "", err
		}
		auth, err := gitsource.CredentialsFor(repoURL, src.URL, env)
		if err != nil {
			return nil, "", fmt.Errorf("STYRMIN_GIT_TOKEN is not sent to %s: %w", gitsource.PublicURL(src.URL), err)
		}
		fsys, commit, err := gitsource.FetchTree(ctx, src.URL, src.Ref, src.Path, auth)
		if errors.Is(err, gitsource.ErrAuth) && env.Token != "" && auth.Token == "" {
			return nil, "", fmt.Errorf("%w (STYRMIN_GIT_TOKEN was not sent: it goes only to the host of the desired-state repository's remote%s)", err, remoteNote(repoURL))
		}
		if err != nil {
			return nil, "", err
		}
		return fsys, commit.String(), nil
	}
}

// remoteNote names the remote credentials go to, for an error message.
func remoteNote(repoURL string) string {
	if repoURL == "" {
		return ", and this repository has no remote \"origin\""
	}
	return ", " + gitsource.PublicURL(repoURL)
}

// desiredStateRemote is the URL of the "origin" remote of the git
// repository holding dir, "" when there is none: the host driver
// repositories must share to get the credentials.
func desiredStateRemote(dir string) string {
	r, err := gitsource.Open(dir, gitsource.OpenOptions{Remote: "origin"})
	if err != nil {
		return ""
	}
	return r.RemoteURL()
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
		if retry, err = failedDeployments(ctx, o.kube); err != nil {
			return err
		}
	}
	dir, err := repo.Subdir(g.Repo)
	if err != nil {
		return err
	}
	remoteURL := repo.RemoteURL() // the remote pushed to; else origin
	if remoteURL == "" {
		remoteURL = desiredStateRemote(g.Repo)
	}
	co, err := o.ident.commitOptions(repo, resolver.CommitOptions{Attempts: o.attempts, Dir: dir, History: repo, Squash: o.squash, RequireRepository: true})
	if err != nil {
		return err
	}
	wo := g.workspaceOptions(ctx, remoteURL)
	wo.DriversKeepGoing = lockPolicy(o) == resolver.LockKeepGoing
	// Before the commit, which writes lockfiles into a working tree that
	// may have held none (a clone without a checkout).
	edited := o.branch == "" && uncommittedEdits(repo, g.Repo, dir)
	out, err := resolver.CommitLocksWith(ctx, repo, wo,
		resolver.LockRequest{Policy: lockPolicy(o), AllowDeletions: o.allowDeletions, Retry: retry}, co)
	if err != nil {
		return withBranchHint(err)
	}
	printNotRetried(stdout, out.NotRetried)
	printWarnings(stdout, out.Warnings)
	failed := errors.Join(out.Skipped, brokenDrivers(out.BrokenDrivers, out.Skipped))
	if edited {
		fmt.Fprintln(stdout, "note: the working tree has uncommitted configuration edits, which are not locked: --commit and --push lock the committed head; commit the edits first")
	}
	if !out.Committed {
		fmt.Fprintf(stdout, "nothing to lock: every deployment is at its locked instance%s\n", lockedBy(repo, out.Commit, dir, branchLabel(repo, o.push)))
		return failed
	}
	for _, c := range out.Changes {
		fmt.Fprintf(stdout, "locked %s\n", describeChange(c))
	}
	printCommitted(stdout, out, repo, o.push)
	return failed
}

// lockedBy names the lock commit at or under head that holds the locks
// ("" when none is found): a run whose push's answer was lost after the
// remote stored it failed, and run again found nothing to lock without
// saying the remote holds that run's lock.
func lockedBy(repo *gitsource.Repo, head gitsource.Hash, dir, branch string) string {
	if head.IsZero() {
		return ""
	}
	un, err := repo.UnlockedChanges(head, dir, resolver.LocksDir, resolver.DefaultMaxUnlocked)
	if err != nil || un.Base.IsZero() {
		return ""
	}
	info, err := repo.Commit(un.Base)
	if err != nil {
		return ""
	}
	where := "under the head of " + branch
	if un.Base == head {
		where = "the head of " + branch
	}
	return fmt.Sprintf(", locked by %s %q (%s, %s)", un.Base.Short(), info.Subject, info.CommitTime.UTC().Format(time.RFC3339), where)
}

// branchLabel names the branch a lock commits on: the remote's with
// --push.
func branchLabel(repo *gitsource.Repo, push bool) string {
	if push {
		return "the remote's " + repo.Branch()
	}
	return repo.Branch()
}

// uncommittedEdits tells whether the working tree's configuration differs
// from HEAD's, for a note that those edits were not locked: --commit and
// --push lock the committed head, and "nothing to lock" alone would read as
// if the edits had been seen and found to change nothing. A working tree
// without a repository (a clone without a checkout) holds no edits.
func uncommittedEdits(repo *gitsource.Repo, dir, sub string) bool {
	head, err := repo.Resolve("HEAD")
	if err != nil || head.IsZero() || resolver.CheckRepository(os.DirFS(dir)) != nil {
		return false
	}
	same, err := repo.SameFiles(head, sub, os.DirFS(dir), resolver.ConfigPaths())
	return err == nil && !same
}
