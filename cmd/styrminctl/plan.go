package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
)

// planFlags are the flags plan and diff share.
type planFlags struct {
	base              string
	head              string
	output            string
	color             string
	allowDeletions    int
	deletionThreshold int
}

func (f *planFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.base, "base", "", "compare with the lockfiles at this revision (default: the merge base of HEAD and its upstream branch, else HEAD)")
	fl.StringVar(&f.head, "head", "", "plan the configuration at this revision instead of the working tree")
	fl.StringVarP(&f.output, "output", "o", "text", "output format: text, markdown or json")
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
		Use:   "plan",
		Short: "Show what the configuration would change, deployment by deployment",
		Long: `plan resolves the working tree (or --head) of the desired-state repository and
compares every deployment with its lockfile at the base revision (default: the merge
base of HEAD and its upstream branch, as a pull request sees it). For each deployment
that would get a new instance it shows the workflow (create, update, upgrade, delete),
the sequence it would get, why (the layer file whose change reaches it), the changed
context and values, the driver actions the workflow runs, and the rendered-manifest
diff. Sensitive parameters are masked and secrets appear only as references.

It reads only the repository: no cluster, no network. A plan that deletes more
deployments than the deletion threshold is refused (exit 1) unless
--allow-deletions covers them.

Exit codes: 0 success; 1 error, resolution failure or refused plan; with
--detailed-exitcode, 2 when the plan has changes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := planner.ParseFormat(f.output)
			if err != nil {
				return err
			}
			p, err := computePlan(g.Repo, f, nil)
			if err != nil {
				return err
			}
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
	cmd.Flags().BoolVar(&detailed, "detailed-exitcode", false, "exit 0 when there are no changes, 2 when there are, 1 on error")
	return cmd
}

// planExit turns the plan's outcome into the exit code, after the plan
// was printed.
func planExit(stderr io.Writer, p *planner.Plan, detailed bool) error {
	if err := p.Err(); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitError{code: 1}
	}
	if len(p.Errors) > 0 {
		fmt.Fprintf(stderr, "error: %d deployment(s) failed to resolve; they are left out of the plan\n", len(p.Errors))
		return exitError{code: 1}
	}
	if detailed && p.HasChanges() {
		return exitError{code: 2}
	}
	return nil
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

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	file, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// computePlan wires git, the resolver and the planner: the head
// configuration resolved against the base's lockfiles, with the driver
// versions of both sides.
func computePlan(repoDir string, f *planFlags, only map[resolver.ID]bool) (*planner.Plan, error) {
	// Rendering allocates about 1 MB per deployment while little stays
	// live (20 MB for 1,000 deployments): collecting less often saves a
	// fifth of the CPU time of a large plan. GOGC still wins when set.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	dir, err := filepath.Abs(repoDir)
	if err != nil {
		return nil, err
	}
	repo, err := gitsource.Open(dir, gitsource.OpenOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: plan compares with the lockfiles of a base commit, so the repository must be a git repository: %w", repoDir, err)
	}
	sub, err := repoSubdir(repo, dir)
	if err != nil {
		return nil, err
	}

	base, baseName, err := baseCommit(repo, dir, f.base)
	if err != nil {
		return nil, err
	}
	baseFS, err := treeAt(repo, base, sub)
	if err != nil {
		return nil, err
	}
	baseLocks, err := resolver.LoadLocks(baseFS)
	if err != nil {
		return nil, fmt.Errorf("lockfiles at the base %s: %w", baseName, err)
	}
	// The base's drivers render the locked instances; a base whose drivers
	// no longer load only loses that part of the plan.
	baseCatalog, _ := drivers.LoadCatalog(baseFS, "drivers", drivers.LoadOptions{})

	var headFS fs.FS = os.DirFS(dir)
	headName, headCommitHash := "working tree", ""
	if h, err := repo.Resolve("HEAD"); err == nil {
		headCommitHash = h.String()
	}
	if f.head != "" {
		h, err := repo.Resolve(f.head)
		if err != nil {
			return nil, err
		}
		if headFS, err = treeAt(repo, h, sub); err != nil {
			return nil, err
		}
		headName, headCommitHash = fmt.Sprintf("%s (%s)", f.head, h.Short()), h.String()
	}
	// The head's own lockfiles do not matter (the base's do), so this
	// loads only configuration and drivers.
	headRepo, err := resolver.NewLoader(0).Load(headFS)
	if err != nil {
		return nil, err
	}
	if len(headRepo.Settings.Drivers) > 0 {
		return nil, fmt.Errorf("styrmin.cue: field drivers: plan works offline and cannot fetch driver sources from other git repositories; keep the drivers in drivers/")
	}
	headCatalog, err := drivers.LoadCatalog(headFS, "drivers", drivers.LoadOptions{})
	if err != nil {
		return nil, err
	}
	res := resolver.Resolve(headRepo, resolver.Options{Catalog: headCatalog, Locks: baseLocks, SourceCommit: headCommitHash, Only: only})
	opts := planner.Options{AllowDeletions: f.allowDeletions, Only: only}
	if f.deletionThreshold >= 0 {
		opts.DeletionThreshold = &f.deletionThreshold
	}
	return planner.Compute(planner.Input{
		Base:     baseLocks,
		Head:     res,
		Repo:     headRepo,
		BaseFS:   baseFS,
		HeadFS:   headFS,
		Drivers:  planner.Catalogs{headCatalog, baseCatalog},
		BaseName: baseName,
		HeadName: headName,
	}, opts)
}

// repoSubdir is the desired-state repository's folder inside the git
// worktree ("." when it is the root), so trees of commits can be read at
// the same place.
func repoSubdir(repo *gitsource.Repo, dir string) (string, error) {
	root := repo.WorktreeDir()
	if root == "" {
		return ".", nil
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(realRoot, realDir)
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), nil
}

// treeAt is the repository folder at a commit (the empty tree for the
// zero hash: no base).
func treeAt(repo *gitsource.Repo, h gitsource.Hash, sub string) (fs.FS, error) {
	fsys, err := repo.FS(h)
	if err != nil {
		return nil, err
	}
	if sub == "." {
		return fsys, nil
	}
	return fs.Sub(fsys, sub)
}

// baseCommit picks the commit whose lockfiles the plan compares with: the
// given revision; else the merge base of HEAD and the upstream of the
// current branch (what a pull request is compared with); else HEAD. A
// repository without commits has no base (zero hash).
func baseCommit(repo *gitsource.Repo, dir, rev string) (gitsource.Hash, string, error) {
	if rev != "" {
		h, err := repo.Resolve(rev)
		if err != nil {
			return gitsource.Hash{}, "", err
		}
		return h, fmt.Sprintf("%s (%s)", rev, h.Short()), nil
	}
	head, err := repo.Resolve("HEAD")
	if err != nil {
		// No commit yet: nothing is locked.
		return gitsource.Hash{}, "", nil
	}
	mb, upstream, err := upstreamMergeBase(dir)
	if err != nil {
		return gitsource.Hash{}, "", err
	}
	if upstream == "" {
		return head, fmt.Sprintf("HEAD (%s)", head.Short()), nil
	}
	h, err := gitsource.ParseHash(mb)
	if err != nil {
		return gitsource.Hash{}, "", err
	}
	return h, fmt.Sprintf("merge base with %s (%s)", upstream, h.Short()), nil
}

// upstreamMergeBase finds the merge base of HEAD and the upstream of the
// current branch (branch.<name>.remote and .merge in the git config). It
// returns "" for upstream when HEAD is detached or the branch has no
// upstream (or the upstream was never fetched).
func upstreamMergeBase(dir string) (hash, upstream string, err error) {
	gr, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true})
	if err != nil {
		return "", "", err
	}
	head, err := gr.Head()
	if err != nil || !head.Name().IsBranch() {
		return "", "", nil
	}
	cfg, err := gr.Config()
	if err != nil {
		return "", "", err
	}
	b, ok := cfg.Branches[head.Name().Short()]
	if !ok || b.Remote == "" || b.Merge == "" {
		return "", "", nil
	}
	up := b.Merge
	if b.Remote != "." {
		up = plumbing.NewRemoteReferenceName(b.Remote, b.Merge.Short())
	}
	ref, err := gr.Reference(up, true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	hc, err := gr.CommitObject(head.Hash())
	if err != nil {
		return "", "", err
	}
	uc, err := gr.CommitObject(ref.Hash())
	if err != nil {
		return "", "", err
	}
	bases, err := hc.MergeBase(uc)
	if err != nil {
		return "", "", fmt.Errorf("merge base of HEAD and %s: %w", up.Short(), err)
	}
	if len(bases) == 0 {
		return "", "", fmt.Errorf("HEAD and its upstream %s have no common commit: pass --base", up.Short())
	}
	return bases[0].Hash.String(), up.Short(), nil
}
