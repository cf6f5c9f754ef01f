package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/keypath"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
)

// lockCommits works out, committing nothing, the lock commits `lock
// --commit` makes on HEAD of repo (sub: the desired-state repository's
// folder in it, dir on disk): one per configuration commit since the last
// lock that changes an instance. Commits whose sum changes nothing (an
// upgrade and its revert) still make them, and the agent runs each.
func lockCommits(ctx context.Context, g *globalOptions, repo *gitsource.Repo, dir, sub string) ([]resolver.ChainStep, error) {
	head, err := repo.Resolve("HEAD")
	if err != nil {
		return nil, err
	}
	fsys, err := repo.TreeAt(head, sub)
	if err != nil {
		return nil, err
	}
	wo := g.workspaceOptions(ctx, desiredStateRemote(dir))
	wo.Progress = nil // the command's progress counts its own resolution
	wo.DriversKeepGoing = true
	return resolver.DryLockChain(ctx, head, fsys, wo, resolver.LockRequest{Policy: resolver.LockKeepGoing},
		resolver.CommitOptions{Dir: sub, History: repo})
}

// planLockCommits describes steps for a plan, each with its commit's
// subject, keeping only the deployments of only (nil: all).
func planLockCommits(repo *gitsource.Repo, steps []resolver.ChainStep, only map[resolver.ID]bool) []planner.LockCommit {
	var out []planner.LockCommit
	for _, s := range steps {
		var changes []resolver.LockChange
		for _, c := range s.Changes {
			if only == nil || only[c.ID] {
				changes = append(changes, c)
			}
		}
		if len(changes) == 0 {
			continue
		}
		subject := ""
		if info, err := repo.Commit(s.Commit); err == nil {
			subject = info.Subject
		}
		out = append(out, planner.NewLockCommit(s.Commit.String(), subject, changes))
	}
	return out
}

// addLockCommits sets p.LockCommits when the working tree holds HEAD's
// configuration and several configuration commits are unlocked: what
// lock --commit makes of them, which their sum the plan shows need not
// be. One that cannot be worked out is a warning: the plan stands.
func addLockCommits(g *globalOptions, p *planner.Plan, h head, repo *gitsource.Repo, dir, sub string, only map[resolver.ID]bool) {
	if p == nil || h.unlocked < 2 || h.commit == "" {
		return
	}
	steps, err := lockCommits(context.Background(), g, repo, dir, sub)
	if err != nil {
		p.Warnings = append(p.Warnings, fmt.Sprintf("the lock commits `styrminctl lock --commit` makes of the %d commits since the last lock could not be worked out: %v", h.unlocked, err))
		return
	}
	p.LockCommits = planLockCommits(repo, steps, only)
}

// checkLockCommits is lock --check's look at lock --commit's chain when
// the working tree locks nothing: several configuration commits whose sum
// changes nothing still lock, each run by the agent. It prints them and
// reports whether any would be made.
func checkLockCommits(ctx context.Context, g *globalOptions, h head, stdout io.Writer) (bool, error) {
	if h.unlocked < 2 || h.commit == "" {
		return false, nil
	}
	dir, err := filepath.Abs(g.Repo)
	if err != nil {
		return false, err
	}
	repo := openRepo(dir)
	if repo == nil {
		return false, nil
	}
	sub, err := repo.Subdir(dir)
	if err != nil {
		return false, err
	}
	steps, err := lockCommits(ctx, g, repo, dir, sub)
	if err != nil {
		return false, fmt.Errorf("working out the lock commits `styrminctl lock --commit` makes of the %d commits since the last lock: %w", h.unlocked, err)
	}
	n := 0
	for _, s := range steps {
		subject := ""
		if info, err := repo.Commit(s.Commit); err == nil {
			subject = " " + keypath.Line(info.Subject)
		}
		for _, c := range s.Changes {
			fmt.Fprintf(stdout, "stale: %s (sequence %d → %d, locking %s%s)\n", c.Path(), seqOf(c.Previous), c.Next.Sequence, s.Commit.Short(), subject)
			n++
		}
	}
	if n == 0 {
		return false, nil
	}
	fmt.Fprintf(stdout, "%d lockfile(s) are stale: the %d commits since the last lock sum to no change, but `styrminctl lock --commit` locks each that changes an instance, and the agent runs each change in turn (%d lock commit(s)); run it\n",
		n, h.unlocked, len(steps))
	return true, nil
}
