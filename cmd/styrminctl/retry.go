package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/resolver"
)

type retryOptions struct {
	commit   bool
	push     bool
	branch   string
	remote   string
	attempts int
	ident    identityFlags
}

// newRetryCmd builds `styrminctl retry CLUSTER/ENV/NAME...`: lock each
// deployment's current instance again with the next sequence.
func newRetryCmd(g *globalOptions, stdout io.Writer) *cobra.Command {
	o := &retryOptions{}
	cmd := &cobra.Command{
		Use:         "retry CLUSTER/ENV/NAME...",
		Annotations: map[string]string{readsRepo: "true", readsCommitWith: "commit,push"},
		Short:       "Lock a deployment's current instance again, so the agent runs its workflow again",
		Example: `  styrminctl retry local/dev/hub
  styrminctl retry local/dev/hub local/staging/hub --push`,
		Long: `retry writes a new lock of each deployment with the same instance and the next
sequence. Its task runs the full workflow against the active instance: an upgrade
that failed runs its pre steps again; a retry of a healthy deployment is an update
that changes nothing. With --commit the lockfiles are committed, with --push pushed
with compare-and-swap; the commit carries a Styrmin-Retry trailer per deployment.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := make([]resolver.ID, 0, len(args))
			for _, a := range args {
				id, err := resolver.ParseID(a)
				if err != nil {
					return err
				}
				ids = append(ids, id)
			}
			if o.commit || o.push {
				return runRetryCommit(cmd.Context(), g, o, ids, stdout)
			}
			return runRetry(g, ids, stdout)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.commit, "commit", false, "commit the written lockfiles")
	f.BoolVar(&o.push, "push", false, "commit and push to the remote branch with compare-and-swap retries (implies --commit)")
	f.StringVar(&o.remote, "remote", "origin", "remote to push to with --push")
	f.StringVar(&o.branch, "branch", "", "branch to commit to (default: the current branch's own name, not its upstream's; needed on a detached HEAD)")
	f.IntVar(&o.attempts, "attempts", 8, "maximum push attempts when the branch moves")
	o.ident.register(cmd, os.Getenv)
	return cmd
}

// runRetry writes the retries' lockfiles into the working tree.
func runRetry(g *globalOptions, ids []resolver.ID, stdout io.Writer) error {
	h, err := loadHead(g.Repo, "", openRepo(g.Repo))
	if err != nil {
		return err
	}
	locks, err := resolver.LoadLocks(h.fsys)
	if err != nil {
		return err
	}
	changes, err := resolver.RetryLocksAfter(locks, ids, h.used)
	if err != nil {
		return err
	}
	written, err := writeLocks(g.Repo, changes)
	for i, c := range changes {
		if written[i] {
			fmt.Fprintf(stdout, "retry locked %s\n", describeChange(c))
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "commit with a %s: CLUSTER/ENV/NAME trailer per deployment (or use --commit)\n", resolver.RetryTrailer)
	return nil
}

// runRetryCommit commits (and pushes) the retries on the branch's head.
func runRetryCommit(ctx context.Context, g *globalOptions, o *retryOptions, ids []resolver.ID, stdout io.Writer) error {
	repo, err := openForCommit(g.Repo, o.branch, o.remote, o.push)
	if err != nil {
		return err
	}
	dir, err := repo.Subdir(g.Repo)
	if err != nil {
		return err
	}
	co, err := o.ident.commitOptions(repo, resolver.CommitOptions{Attempts: o.attempts, Dir: dir, History: repo, RequireRepository: true})
	if err != nil {
		return err
	}
	out, err := resolver.CommitRetries(ctx, repo, ids, co)
	if err != nil {
		return withBranchHint(err)
	}
	for _, c := range out.Changes {
		fmt.Fprintf(stdout, "retry locked %s\n", describeChange(c))
	}
	printCommitted(stdout, out, repo, o.push)
	return nil
}

// openForCommit opens the repository to commit locks on branch, with the
// environment's push credentials when pushing to remote.
func openForCommit(dir, branch, remote string, push bool) (*gitsource.Repo, error) {
	opts := gitsource.OpenOptions{Branch: branch}
	if push {
		auth, err := gitAuthFromEnv()
		if err != nil {
			return nil, err
		}
		opts.Remote, opts.Auth = remote, auth
	}
	repo, err := gitsource.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	if repo.Branch() == "" {
		// CI checkouts (pull requests, GitLab, Jenkins) detach HEAD.
		return nil, errors.New("HEAD is detached and no branch was given: pass --branch BRANCH, the branch to commit on")
	}
	return repo, nil
}

// withBranchHint adds to a branch missing on the remote the --branch to
// pass when the local branch of that name tracks another: the default is
// the local branch's own name, as git push's default takes it, so a push
// never lands on a branch nobody named.
func withBranchHint(err error) error {
	if e, ok := errors.AsType[*gitsource.BranchNotFoundError](err); ok && e.Upstream != "" {
		return fmt.Errorf("%w: pass --branch %s to commit on %s/%s", err, e.Upstream, e.Remote, e.Upstream)
	}
	return err
}

// printCommitted says where a lock commit went.
func printCommitted(stdout io.Writer, out resolver.CommitOutcome, repo *gitsource.Repo, push bool) {
	verb := "committed"
	if push {
		verb = "pushed"
	}
	if n := len(out.Commits); n > 1 {
		fmt.Fprintf(stdout, "%s %d lock commits, one per configuration change, ending at %s on %s after %d attempt(s)\n", verb, n, out.Commit, repo.Branch(), out.Attempts)
		return
	}
	fmt.Fprintf(stdout, "%s %s on %s after %d attempt(s)\n", verb, out.Commit, repo.Branch(), out.Attempts)
}

// failedDeployments reads the deployments whose newest task failed in
// the cluster kubectl's flags name, with that task's sequence.
func failedDeployments(ctx context.Context, k *kubeOptions) (map[resolver.ID]int64, error) {
	c, err := k.client()
	if err != nil {
		return nil, err
	}
	return operator.FailedDeployments(ctx, c)
}

// printNotRetried says which deployments were not retried, and why.
func printNotRetried(stdout io.Writer, ids []resolver.ID) {
	for _, id := range ids {
		fmt.Fprintf(stdout, "not retried: %s (its lock moved on since the task that failed)\n", id)
	}
}
