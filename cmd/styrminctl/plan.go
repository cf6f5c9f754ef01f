package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/keypath"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/version"
)

// planFlags are the flags plan and diff share.
type planFlags struct {
	base              string
	head              string
	output            string
	color             string
	allowDeletions    int
	deletionThreshold int
	// restores reads the cluster (kube) for restores in progress.
	restores bool
	kube     *kubeOptions
}

func (f *planFlags) register(cmd *cobra.Command) {
	addOutputFlag(cmd, &f.output, outText, outMarkdown, outJSON, outYAML)
	fl := cmd.Flags()
	fl.StringVar(&f.base, "base", "", "compare with the lockfiles at this revision (default: the merge base of HEAD and its upstream branch, else HEAD)")
	fl.StringVar(&f.head, "head", "", "plan the configuration at this revision instead of the working tree")
	fl.StringVar(&f.color, "color", "auto", "colour the text output: auto (when writing to a terminal), always or never")
	fl.IntVar(&f.allowDeletions, "allow-deletions", 0, "allow a plan to delete up to this many deployments, above the deletion threshold")
	fl.IntVar(&f.deletionThreshold, "deletion-threshold", -1, "deletions allowed without --allow-deletions (default: the repository's deletionThreshold, else 1)")
}

// newPlanCmd builds `styrminctl plan`: what locking the working tree would
// change, compared with the lockfiles at a base revision.
func newPlanCmd(g *globalOptions, stdout io.Writer) *cobra.Command {
	f := &planFlags{}
	var detailed bool
	cmd := &cobra.Command{
		Use:         "plan",
		Annotations: map[string]string{readsRepo: "true", readsCommitWith: "head"},
		Short:       "Show what the configuration would change, deployment by deployment",
		Example: `  styrminctl plan
  styrminctl plan --base origin/main -o markdown
  styrminctl plan --detailed-exitcode -o json > plan.json`,
		Long: `plan resolves the working tree (or --head) of the desired-state repository and
compares every deployment with its lockfile at the base revision (default: the merge
base of HEAD and its upstream branch, as a pull request sees it). For each deployment
that would get a new instance it shows the workflow (create, update, upgrade, delete),
the sequence it would get, why (the layer file whose change reaches it), the changed
context and values, the driver actions the workflow runs, and the rendered-manifest
diff. Sensitive parameters are masked and secrets appear only as references.

It compares with the lockfiles, not with what a cluster runs: after a change that failed
there, the agent chooses the workflow against the instance the cluster runs (an upgrade
whose hooks did not all run is run again as an upgrade), whatever the plan says. Several
commits since the last lock are shown as one change; lock --commit locks each that
changes an instance on its own, and the plan notes it and lists those lock commits
(with the workflow of each instance) when they are not its one change.

It reads only the repository: no cluster, no network, unless --restores asks it to
read the cluster (kubectl's flags) for restores in progress: a change of a deployment
being restored is then shown as waiting for the restore (the agent applies it after
the restore succeeds). A plan that deletes more
deployments than the deletion threshold is refused (exit 1) unless
--allow-deletions covers them.

Exit codes: 0 success; 1 error, resolution failure (a chart that does not render
with a deployment's values included), a new instance that cannot be rendered, or
refused plan; with --detailed-exitcode, 2 when the plan has changes or lock --commit
would lock commits whose sum changes nothing (an upgrade and its revert: the agent
runs both, hooks and all).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := planner.ParseFormat(f.output)
			if err != nil {
				return err
			}
			prog := g.newProgress()
			p, err := computePlan(g, f, nil, prog)
			if err != nil {
				return err
			}
			prog.done()
			ro, err := renderOptions(f, stdout, false)
			if err != nil {
				return err
			}
			if err := planner.Render(stdout, p, format, ro); err != nil {
				return err
			}
			return planExit(cmd.ErrOrStderr(), p, detailed)
		},
	}
	f.register(cmd)
	f.kube = newKubeOptions(kubeRESTConfig)
	f.kube.register(cmd, noNamespace, "")
	cmd.Flags().BoolVar(&f.restores, "restores", false, "read the cluster (kubectl's flags) for restores in progress and show the changes that wait for them")
	cmd.Flags().BoolVar(&detailed, "detailed-exitcode", false, "exit 0 when there are no changes, 2 when there are, 1 on error")
	return cmd
}

// planExit turns the plan's outcome into the exit code, after the plan
// was printed. Each failed deployment is named on stderr with its error
// (file, line, field) as well as in the plan: CI sends the plan to a file
// (plan -o json > plan.json), and its log shows stderr. The messages are
// the plan's own, which hold no sensitive value (masked, or placeholders).
func planExit(stderr io.Writer, p *planner.Plan, detailed bool) error {
	if err := p.Err(); err != nil {
		fmt.Fprintln(stderr, "error:", keypath.Controls(err.Error()))
		return exitError{code: 1}
	}
	failed := false
	for _, e := range p.Errors {
		printDeploymentError(stderr, e.ID, e.Message)
	}
	if len(p.Errors) > 0 {
		fmt.Fprintf(stderr, "error: %d deployment(s) failed to resolve; they are left out of the plan\n", len(p.Errors))
		failed = true
	}
	for _, d := range unrendered(p) {
		printDeploymentError(stderr, d.ID, "the new instance could not be rendered; the agent would stall on it: "+d.Manifests.Error)
		failed = true
	}
	if failed {
		return exitError{code: 1}
	}
	// Commits since the last lock whose sum changes nothing still lock.
	if detailed && p.WouldLock() {
		return exitError{code: 2}
	}
	return nil
}

// printDeploymentError prints msg as "error: ID: …", one line per line of
// msg (a deployment's configuration errors are one a line), so each line
// names the deployment it is about; its control characters are escaped
// (keypath.Controls), as every error the command prints.
func printDeploymentError(stderr io.Writer, id, msg string) {
	for line := range strings.SplitSeq(strings.TrimRight(msg, "\n"), "\n") {
		fmt.Fprintf(stderr, "error: %s: %s\n", id, keypath.Controls(line))
	}
}

// unrendered lists the deployments of p whose new instance could not be
// rendered. A locked instance that no longer renders (its driver gone from
// the base) only leaves the diff out: the agent applies the new one. The
// planner words that side's errors so (planner.planOne).
func unrendered(p *planner.Plan) []*planner.Deployment {
	var out []*planner.Deployment
	for _, d := range p.Deployments {
		e := d.Manifests.Error
		if e == "" || d.To == nil || strings.HasPrefix(e, "rendering the locked instance: ") ||
			(strings.HasPrefix(e, "driver ") && strings.HasSuffix(e, " of the locked instance is not available")) {
			continue
		}
		out = append(out, d)
	}
	return out
}

func renderOptions(f *planFlags, stdout io.Writer, full bool) (planner.RenderOptions, error) {
	o := planner.RenderOptions{Full: full}
	switch f.color {
	case "always":
		o.Color = true
	case "never":
	case "auto":
		o.Color = isTerminal(stdout) && os.Getenv("NO_COLOR") == ""
	default:
		return o, fmt.Errorf("--color %q: expected auto, always or never", f.color)
	}
	return o, nil
}

// computePlan wires git and the planner: the head configuration resolved
// against the lockfiles of the base commit, with the driver versions of
// both sides.
func computePlan(g *globalOptions, f *planFlags, only map[resolver.ID]bool, prog *progress) (*planner.Plan, error) {
	dir, err := filepath.Abs(g.Repo)
	if err != nil {
		return nil, err
	}
	repo, err := gitsource.Open(dir, gitsource.OpenOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: plan compares with the lockfiles of a base commit, so the repository must be a git repository: %w", g.Repo, err)
	}
	sub, err := repo.Subdir(dir)
	if err != nil {
		return nil, err
	}
	base, err := repo.ResolveBase(f.base)
	if errors.Is(err, gitsource.ErrNoMergeBase) {
		return nil, fmt.Errorf("%w: pass --base", err)
	}
	if err != nil && f.base != "" {
		return nil, fmt.Errorf("--base %s: %w", f.base, err)
	}
	if err != nil {
		return nil, err
	}
	baseFS, err := repo.TreeAt(base.Commit, sub)
	if err != nil {
		return nil, err
	}
	h, err := loadHead(dir, f.head, repo)
	if err != nil && f.head != "" {
		return nil, fmt.Errorf("--head %s: %w", f.head, err)
	}
	if err != nil {
		return nil, err
	}
	opts := planner.Options{AllowDeletions: f.allowDeletions, Only: only}
	if f.restores {
		c, err := f.kube.client()
		if err != nil {
			return nil, fmt.Errorf("--restores: %w", err)
		}
		if opts.Restoring, err = operation.RestoresInProgress(context.Background(), c); err != nil {
			return nil, fmt.Errorf("--restores: %w", err)
		}
	}
	if prog != nil {
		opts.Progress = prog.planned
	}
	opts.DriverLimits, opts.Sandbox = g.driverOptions()
	// Loads stay sandboxed; the renders of a plan are per deployment, like
	// the lock's policy render (see planner.Options.RenderInProcess).
	opts.RenderInProcess = true
	if f.deletionThreshold >= 0 {
		opts.DeletionThreshold = &f.deletionThreshold
	}
	p, err := planner.ComputeTrees(planner.Trees{
		Base: baseFS, BaseName: base.Name,
		Head: h.fsys, HeadName: h.name, HeadCommit: h.commit, Used: h.used, Reused: h.reused,
	}, opts)
	if p != nil {
		p.StyrminVersion = version.Get().Short()
		if h.unlocked > 1 {
			p.UnlockedCommits = h.unlocked
		}
		if err == nil {
			addLockCommits(g, p, h, repo, dir, sub, only)
		}
	}
	return p, err
}
