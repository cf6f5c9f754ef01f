package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/atomicfile"
	"github.com/styrmin/styrmin/resolver"
)

type lockOptions struct {
	// retryFailed also locks again the deployments whose newest task
	// failed in the cluster of kubeconfig.
	retryFailed bool
	kube        *kubeOptions
	// allowDeletions allows a lock to delete up to this many deployments,
	// above the deletion threshold.
	allowDeletions int
	check          bool
	keepGoing      bool
	allOrNothing   bool
	commit         bool
	push           bool
	branch         string
	remote         string
	attempts       int
	squash         bool
	ident          identityFlags
}

// newLockCmd builds `styrminctl lock`: resolve the working tree and write a
// lockfile with sequence+1 for every deployment whose instance changed.
func newLockCmd(g *globalOptions, load restConfigFunc, stdout io.Writer) *cobra.Command {
	o := &lockOptions{kube: newKubeOptions(load)}
	cmd := &cobra.Command{
		Use:         "lock",
		Annotations: map[string]string{readsRepo: "true", readsCommitWith: "commit,push"},
		Short:       "Resolve the configuration and write lockfiles for the deployments that changed",
		Example: `  styrminctl lock
  styrminctl lock --check
  styrminctl lock --push --author "CI <ci@example.com>"
  styrminctl lock --commit --retry-failed --context prod`,
		Long: `lock resolves the working tree of the desired-state repository and writes
locks/<cluster>/<env>/<name>.lock.yaml with the next sequence for every deployment
whose resolved instance changed. Unchanged lockfiles stay byte-identical; a removed
deployment gets a tombstone. A deployment that does not resolve keeps its previous
lock and does not hold back the others: lock writes the rest and exits 1 naming it
(--all-or-nothing writes nothing instead). With --check nothing is written and the exit code is 2
when locks are stale and 1 when the configuration does not resolve (for CI on pull
requests, which can tell the two apart); several commits since the last lock whose sum
changes nothing are stale too when lock --commit would lock them (an upgrade and its
revert, each run by the agent). With --commit the lockfiles are
committed; with --push the commit is pushed with compare-and-swap retries: when the
branch moved, lock resolves again on the new head and renumbers.

With --commit and --push every first-parent commit since the locks last changed that
changes a deployment's instance gets its own sequence, as a chain of lock commits (one
per configuration commit, in order), so two upgrades merged before one lock run both
run their hooks; --squash locks the head as one change instead. A sequence always
comes after the highest the branch's history ever used for the deployment, whatever
happened to its lockfile.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.check && (o.push || o.commit) {
				// A check that commits would land what a pull request's
				// check is meant only to judge.
				return usageError{errors.New("--check writes nothing: it cannot be given with --commit or --push")}
			}
			prog := g.newProgress()
			defer prog.done()
			if o.push || o.commit {
				return runLockCommit(cmd.Context(), g, o, prog.above(stdout))
			}
			return runLock(cmd.Context(), g, o, prog.above(stdout))
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.check, "check", false, "write nothing; exit 2 when lockfiles are stale, 1 on an error")
	f.BoolVar(&o.keepGoing, "keep-going", true, "lock the deployments that resolve even when others fail, keeping the previous lock of those (exit 1 naming them); the default")
	_ = f.MarkDeprecated("keep-going", "it is the default; --all-or-nothing asks for the opposite")
	f.BoolVar(&o.allOrNothing, "all-or-nothing", false, "lock nothing while any deployment fails to resolve")
	f.BoolVar(&o.commit, "commit", false, "commit the written lockfiles")
	f.BoolVar(&o.push, "push", false, "commit and push to the remote branch with compare-and-swap retries (implies --commit)")
	f.StringVar(&o.remote, "remote", "origin", "remote to push to with --push")
	f.StringVar(&o.branch, "branch", "", "branch to commit to (default: the current branch's own name, not its upstream's; needed on a detached HEAD)")
	f.BoolVar(&o.squash, "squash", false, "with --commit/--push, lock the head as one change even when several configuration commits since the last lock change instances (default: one lock commit per such commit, so each change runs its own workflow)")
	f.IntVar(&o.attempts, "attempts", 8, "maximum push attempts when the branch moves")
	f.IntVar(&o.allowDeletions, "allow-deletions", 0, "allow the lock to delete up to this many deployments, above the deletion threshold (recorded in a Styrmin-Allow-Deletions trailer with --commit/--push)")
	f.BoolVar(&o.retryFailed, "retry-failed", false, "also lock again, with the same instance, every deployment whose newest task failed in the cluster kubectl's flags name (a retry)")
	o.kube.register(cmd, noNamespace, "")
	o.ident.register(cmd, os.Getenv)
	return cmd
}

// lockPolicy is the fan-out policy of every lock path: a deployment that
// does not resolve (or whose driver version a version that does not load
// could change) keeps its lock and does not hold the others back.
func lockPolicy(o *lockOptions) resolver.LockPolicy {
	if o.allOrNothing {
		return resolver.LockAllOrNothing
	}
	return resolver.LockKeepGoing
}

func runLock(ctx context.Context, g *globalOptions, o *lockOptions, stdout io.Writer) error {
	req := resolver.LockRequest{Policy: lockPolicy(o), AllowDeletions: o.allowDeletions}
	if o.check {
		req.Policy = resolver.LockAllOrNothing // the pull request's check stays strict
	}
	ws, h, err := headWorkspaceWith(ctx, g, func(wo *resolver.WorkspaceOptions) {
		// A driver version that does not load holds back only the
		// deployments it could be chosen for, as a deployment that
		// does not resolve holds back only itself.
		wo.DriversKeepGoing = req.Policy == resolver.LockKeepGoing
	})
	if err != nil {
		return err
	}
	if o.retryFailed {
		if req.Retry, err = failedDeployments(ctx, o.kube); err != nil {
			return err
		}
	}
	lo, err := ws.LockFor(req)
	if err != nil {
		return err
	}
	printNotRetried(stdout, lo.NotRetried)
	printWarnings(stdout, lo.Warnings)
	changes, resErr := lo.All(), errors.Join(lo.Skipped, brokenDrivers(ws.Catalog.Broken(), lo.Skipped))
	if o.check {
		for _, c := range changes {
			fmt.Fprintf(stdout, "stale: %s (sequence %d → %d)\n", c.Path(), seqOf(c.Previous), c.Next.Sequence)
		}
		if len(changes) > 0 {
			fmt.Fprintf(stdout, "%d lockfile(s) are stale: run `styrminctl lock` and commit the result\n", len(changes))
			return exitError{code: 2}
		}
		if resErr == nil {
			stale, err := checkLockCommits(ctx, g, h, stdout)
			if err != nil {
				return err
			}
			if stale {
				return exitError{code: 2}
			}
		}
		fmt.Fprintln(stdout, "locks are up to date")
		return resErr
	}
	printWorkingTreeNotes(stdout, h, len(changes))
	written, err := writeLocks(g.Repo, changes)
	for i, c := range changes {
		if written[i] {
			fmt.Fprintf(stdout, "locked %s\n", describeChange(c))
		}
	}
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		fmt.Fprintln(stdout, "nothing to lock: every deployment is at its locked instance")
	}
	return resErr
}

// printWarnings shows what the configuration may not mean, though the
// lock takes it (resolver.SharedDomains), one line each.
func printWarnings(stdout io.Writer, warnings []string) {
	for _, w := range warnings {
		fmt.Fprintln(stdout, "warning: "+w)
	}
}

// printWorkingTreeNotes says what a lock of the working tree cannot do
// that lock --commit does.
func printWorkingTreeNotes(stdout io.Writer, h head, changes int) {
	if changes == 0 {
		return
	}
	if h.unlocked > 1 {
		fmt.Fprintf(stdout, "note: %d configuration commits since the last lock are locked here as one change; `styrminctl lock --commit` gives each its own instance\n", h.unlocked)
	}
	if h.edited {
		fmt.Fprintln(stdout, "note: the configuration has uncommitted edits, so the new instances record no sourceCommit (no commit holds that configuration); commit the edits first, then lock, to record one")
	}
}

func seqOf(in *resolver.Instance) int64 {
	if in == nil {
		return 0
	}
	return in.Sequence
}

func describeChange(c resolver.LockChange) string {
	what := "instance"
	if c.Next.Tombstone() {
		what = "tombstone"
	}
	return fmt.Sprintf("%s=%d (%s, %s)", c.ID, c.Next.Sequence, what, c.Path())
}

// lockWriters is how many lockfiles are written at once: a write is a
// few system calls (open, write, close, rename), and one after another
// they were a sixth of a 1,000-deployment lock's time.
const lockWriters = 4

// writeLocks writes the changes' lockfiles under the repository root, each
// through a rename, lockWriters at a time. It reports which were written,
// and the errors of those that were not.
func writeLocks(root string, changes []resolver.LockChange) ([]bool, error) {
	dirs := map[string]bool{}
	written := make([]bool, len(changes))
	for _, c := range changes {
		rel := path.Dir(c.Path())
		if !dirs[rel] {
			if err := refuseLinkedFolders(root, rel); err != nil {
				return written, err
			}
		}
		dirs[rel] = true
	}
	for d := range dirs {
		removeStaleTemps(filepath.Join(root, filepath.FromSlash(d)), time.Now().Add(-staleTempAge))
	}
	errs := make([]error, len(changes))
	next := make(chan int)
	var g errgroup.Group
	for range min(lockWriters, len(changes)) {
		g.Go(func() error {
			w := atomicfile.New(resolver.LockTempPrefix)
			// A spare left behind is skipped by the loader and removed by
			// a later lock, as a killed lock's.
			defer func() { _ = w.Close() }()
			for i := range next {
				errs[i] = w.Write(filepath.Join(root, filepath.FromSlash(changes[i].Path())), changes[i].Data)
				written[i] = errs[i] == nil
			}
			return nil
		})
	}
	for i := range changes {
		next <- i
	}
	close(next)
	_ = g.Wait()
	return written, errors.Join(errs...)
}

// refuseLinkedFolders refuses rel (a slash path under root) when it or a
// folder above it is a symbolic link: the loader refuses them already,
// and a write must not follow one out of the repository either, whoever
// made the link since. Checked for every folder before any write, so a
// refused lock writes nothing.
func refuseLinkedFolders(root, rel string) error {
	p := root
	for _, part := range strings.Split(rel, "/") {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // made by the write, as a real folder
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			rp, _ := filepath.Rel(root, p)
			return fmt.Errorf("%s: %w", filepath.ToSlash(rp), resolver.ErrSymlinkedFolder)
		}
	}
	return nil
}

// staleTempAge is how old a temporary lockfile must be to be another
// lock's leftover (one killed before its rename) rather than a file a
// lock running beside this one is writing.
const staleTempAge = time.Minute

// removeStaleTemps removes, best effort, the temporary lockfiles in dir
// last written before cutoff: the loader skips them, but they would
// otherwise pile up in the working tree, and into commits.
func removeStaleTemps(dir string, cutoff time.Time) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), resolver.LockTempPrefix) {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// brokenDrivers is the error of the driver versions that do not load,
// which a lock that keeps going leaves out (only the deployments whose
// choice of version one could change are held back, and named as failed
// in skipped): the lock writes the rest and exits 1, naming each, as for
// a deployment that does not resolve. A version a held-back deployment's
// error names already, with its folder and why, is not named again.
func brokenDrivers(broken []*drivers.BrokenDriverError, skipped error) error {
	named := map[string]bool{}
	brokenIn(skipped, named)
	var errs []error
	for _, b := range broken {
		if !named[b.Name+"@"+b.Version] {
			errs = append(errs, fmt.Errorf("driver %s@%s does not load and was left out: %w", b.Name, b.Version, b.Err))
		}
	}
	return errors.Join(errs...)
}

// brokenIn adds to named the driver versions ("name@version") whose
// BrokenDriverError err holds, joined or wrapped.
func brokenIn(err error, named map[string]bool) {
	switch e := err.(type) {
	case nil:
	case *drivers.BrokenDriverError:
		named[e.Name+"@"+e.Version] = true
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			brokenIn(x, named)
		}
	default:
		brokenIn(errors.Unwrap(err), named)
	}
}
