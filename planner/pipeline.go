package planner

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

// Trees are the two sides of a plan as folders of the desired-state
// repository. The planner never talks to git: the caller reads the trees
// (a commit's, or the working copy) and names them.
type Trees struct {
	// Base is the repository at the base commit: its lockfiles are what
	// the head is compared with and its drivers render them. An empty
	// folder means no base (nothing is locked).
	Base fs.FS
	// BaseName describes the base in the plan ("" for none).
	BaseName string
	// Head is the configuration planned.
	Head fs.FS
	// HeadName describes the head in the plan ("working tree").
	HeadName string
	// HeadCommit is recorded in the head's instances ("" for none).
	HeadCommit string
	// Used are the sequences the head's history used (Input.Used).
	Used resolver.UsedSequences
	// Reused are those it used for two instances (Input.Reused).
	Reused resolver.ReusedSequences
}

// ErrRemoteDrivers is returned (wrapped) by ComputeTrees when the head
// lists driver sources in other git repositories.
var ErrRemoteDrivers = errors.New("plan works offline and cannot fetch driver sources from other git repositories; keep the drivers in drivers/")

// ComputeTrees loads both sides of a plan and computes it: the base's
// lockfiles and driver versions, the head's configuration and drivers,
// the head resolved against the base's lockfiles (so driver selection
// sees them), then Compute with the drivers of both sides.
func ComputeTrees(t Trees, opts Options) (*Plan, error) {
	// With a sandbox, the drivers of both sides load (mostly waiting for
	// its children) while the lockfiles and the configuration are read.
	// Errors are reported in the order of old, when one loaded after the
	// other; without a sandbox everything runs as before, one after the
	// other, since an in-process load's time limit is wall-clock time.
	var base, head *drivers.PendingCatalog
	if opts.Sandbox != nil {
		if limits, err := resolver.NewLoader(0).WithSandbox(opts.ConfigSandbox).DriverLimits(t.Head); err == nil {
			o := catalogOptions(limits, opts)
			base, head = drivers.StartCatalog(t.Base, "drivers", o), drivers.StartCatalog(t.Head, "drivers", o)
			defer base.Wait()
			defer head.Wait()
		}
	}

	// The head's configuration loads while the lockfiles are read: both
	// only read, and the lockfiles' git reads leave a core idle. Its
	// error still comes after theirs.
	type loaded struct {
		repo *resolver.Repository
		err  error
	}
	headLoad := make(chan loaded, 1)
	go func() {
		r, err := resolver.NewLoader(0).WithSandbox(opts.ConfigSandbox).Load(t.Head)
		headLoad <- loaded{r, err}
	}()
	// The head's lockfiles mostly are the base's: decoded once.
	locks := resolver.NewLockLoader()
	baseLocks, err := locks.Load(t.Base)
	if err != nil {
		return nil, fmt.Errorf("lockfiles at the base %s: %w", t.BaseName, err)
	}
	// The plan compares with the base's lockfiles, but the head's must be
	// sound too: a hand-edited lockfile in a pull request fails its plan,
	// as it would fail the lock after the merge.
	if _, err := locks.Load(t.Head); err != nil {
		return nil, fmt.Errorf("lockfiles at %s: %w", t.HeadName, err)
	}
	hl := <-headLoad
	headRepo, err := hl.repo, hl.err
	if err != nil {
		return nil, err
	}
	// The lock would refuse it: Load leaves it to plan and lock.
	if err := resolver.CheckSharedBackupLocations(headRepo); err != nil {
		return nil, err
	}
	if len(headRepo.Settings.Drivers) > 0 {
		return nil, fmt.Errorf("styrmin.cue: field drivers: %w", ErrRemoteDrivers)
	}
	limits, err := headRepo.Settings.DriverLimits()
	if err != nil {
		return nil, err
	}
	// The base's drivers only render the locked instances: a base whose
	// drivers no longer load loses that part of the plan, nothing more.
	var baseCatalog, headCatalog *drivers.Catalog
	if head != nil {
		baseCatalog, _ = base.Wait()
		headCatalog, err = head.Wait()
	} else {
		o := catalogOptions(limits, opts)
		baseCatalog, _ = drivers.LoadCatalog(t.Base, "drivers", o)
		headCatalog, err = drivers.LoadCatalog(t.Head, "drivers", o)
	}
	if err != nil {
		return nil, err
	}
	ropts := resolver.Options{Catalog: headCatalog, Locks: baseLocks, SourceCommit: t.HeadCommit, Only: opts.Only}
	if opts.Progress != nil {
		ropts.Progress = func(done, total int) { opts.Progress("resolve", done, total) }
	}
	res := resolver.Resolve(headRepo, ropts)
	return Compute(Input{
		Base:     baseLocks,
		Head:     res,
		Repo:     headRepo,
		BaseFS:   t.Base,
		HeadFS:   t.Head,
		Drivers:  Catalogs{headCatalog, baseCatalog},
		BaseName: t.BaseName,
		HeadName: t.HeadName,
		Used:     t.Used,
		Reused:   t.Reused,
	}, opts)
}

// catalogOptions are the load options of both sides' drivers. The head's
// resolution renders each instance for the policy check, and Compute
// renders it again for the diff: once, with a cache. The base's drivers
// are mostly the head's: each version the two sides hold alike loads
// once.
func catalogOptions(limits drivers.Limits, opts Options) drivers.LoadOptions {
	return drivers.LoadOptions{Limits: limits.Merge(opts.DriverLimits), Sandbox: opts.Sandbox,
		RenderCache: drivers.NewRenderCache(), Shared: drivers.NewLoadShare()}
}
