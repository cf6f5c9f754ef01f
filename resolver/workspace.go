package resolver

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
)

// DriverFetcher returns the folder of a driver version kept in another git
// repository and the commit its ref resolved to (recorded in the instance,
// so the agent fetches exactly that commit). The resolver itself never
// talks to git: the caller wires gitsource in.
type DriverFetcher func(src DriverSource) (fsys fs.FS, commit string, err error)

// WorkspaceOptions configures LoadWorkspace.
type WorkspaceOptions struct {
	// SourceCommit is recorded in new instances.
	SourceCommit string
	// FetchDriver loads the driver sources listed in styrmin.cue; nil
	// makes such a listing an error.
	FetchDriver DriverFetcher
	// ExtraDrivers are added to the catalog (for example driver versions
	// from an older commit, so a plan can render what is locked).
	ExtraDrivers []*drivers.Driver
	// MaxFileSize bounds configuration files (0: DefaultMaxFileSize).
	MaxFileSize int64
	// DriverLimits override styrmin.cue's limits block where set (a
	// command's flags); Sandbox, when set, evaluates drivers in a child
	// process (see drivers.Sandbox).
	DriverLimits drivers.Limits
	Sandbox      *drivers.Sandbox
	// ConfigSandbox, when set, evaluates each configuration file in a
	// sandbox child first (see ConfigSandbox): for a process that reads
	// what any author of the repository wrote (the agent).
	ConfigSandbox *ConfigSandbox
	// Used are the sequences the branch's history used; new sequences come
	// after them (nil: after the lockfiles only).
	Used UsedSequences
	// Reused are the sequences the branch's history used for more than
	// one instance: a lockfile at one is locked again past it.
	Reused ReusedSequences
	// HeadLocks are the sequences of the branch head's lockfiles when the
	// workspace is of an older commit (a step of a lock chain; nil: its
	// own lockfiles are the head's). A lockfile below a used sequence is
	// locked again only when the head's is below it too: a revert, not a
	// retry committed after the step.
	HeadLocks map[ID]int64
	// Progress is Options.Progress of every Resolve of the workspace.
	Progress func(done, total int)
	// RenderCache is shared by the renders of the workspace's drivers
	// (nil: none). A lock needs none: what a step leaves unchanged is its
	// lock, not rendered again, and a cache would hold every render of a
	// long chain.
	RenderCache *drivers.RenderCache
	// DriversKeepGoing loads the catalog keeping the driver versions that
	// load when others do not (drivers.LoadCatalogKeepGoing): only the
	// deployments whose choice of version a broken one could change fail,
	// naming it. For a lock that keeps going (LockKeepGoing).
	DriversKeepGoing bool
}

// ConfigPaths are the files and folders of a desired-state repository
// that resolution reads (lockfiles aside): a working tree whose files
// there equal a commit's resolves as that commit does.
func ConfigPaths() []string {
	return []string{"styrmin.cue", "styrmin.yaml", "styrmin.yml", "clusters", "drivers"}
}

// Workspace is a desired-state repository loaded at one point: its
// configuration, its driver catalog and its current lockfiles.
type Workspace struct {
	Repo    *Repository
	Catalog *drivers.Catalog
	Locks   map[ID]*Instance
	opts    WorkspaceOptions
	// fsys is what the workspace was loaded from: an upgrade reads the
	// deployment files it edits there.
	fsys fs.FS
	// origins are the driver versions fetched from other repositories, by
	// name@version: where new instances record they come from.
	origins map[string]*DriverOrigin
}

// SetSource records what the workspace's new instances come from: the
// commit whose configuration it is ("" for none) and the sequences its
// history used (reused: for more than one instance), for a caller that
// learns them while the workspace loads. Call it before the workspace
// resolves or locks.
func (w *Workspace) SetSource(commit string, used UsedSequences, reused ReusedSequences) {
	w.opts.SourceCommit, w.opts.Used, w.opts.Reused = commit, used, reused
}

// LoadWorkspace loads configuration, drivers (the repo's drivers/ folder
// and the listed driver sources) and locks from fsys.
func LoadWorkspace(fsys fs.FS, opts WorkspaceOptions) (*Workspace, error) {
	loader := NewLoader(opts.MaxFileSize).WithSandbox(opts.ConfigSandbox)
	// With a sandbox, the drivers load (mostly waiting for its children)
	// and the lockfiles are read while the configuration loads. Errors are
	// reported in the order of old, when one loaded after the other: the
	// configuration's, the limits', the drivers', the driver sources', the
	// lockfiles'. Without a sandbox everything runs one after the other,
	// as before: an in-process load's time limit is wall-clock time.
	loadOpts := func(limits drivers.Limits) drivers.LoadOptions {
		return drivers.LoadOptions{MaxFileSize: opts.MaxFileSize, Limits: limits.Merge(opts.DriverLimits), Sandbox: opts.Sandbox, RenderCache: opts.RenderCache}
	}
	var pending *drivers.PendingCatalog
	type loadedLocks struct {
		locks map[ID]*Instance
		err   error
	}
	var locksLoad chan loadedLocks
	if opts.Sandbox != nil {
		if limits, err := loader.DriverLimits(fsys); err == nil {
			start := drivers.StartCatalog
			if opts.DriversKeepGoing {
				start = drivers.StartCatalogKeepGoing
			}
			pending = start(fsys, "drivers", loadOpts(limits))
			defer pending.Wait()
			// The lockfiles are read while the configuration loads too.
			locksLoad = make(chan loadedLocks, 1)
			go func() {
				l, err := LoadLocks(fsys)
				locksLoad <- loadedLocks{l, err}
			}()
		}
	}
	repo, err := loader.Load(fsys)
	if err != nil {
		return nil, err
	}
	limits, err := repo.Settings.DriverLimits()
	if err != nil {
		return nil, err
	}
	dopts := loadOpts(limits)
	var cat *drivers.Catalog
	var locks map[ID]*Instance
	var locksErr error
	if pending != nil {
		ll := <-locksLoad
		locks, locksErr = ll.locks, ll.err
		cat, err = pending.Wait()
	} else {
		load := drivers.LoadCatalog
		if opts.DriversKeepGoing {
			load = drivers.LoadCatalogKeepGoing
		}
		cat, err = load(fsys, "drivers", dopts)
	}
	if err != nil {
		return nil, err
	}
	origins := map[string]*DriverOrigin{}
	for i, src := range repo.Settings.Drivers {
		if opts.FetchDriver == nil {
			return nil, &ConfigError{File: "styrmin.cue", Field: fmt.Sprintf("drivers[%d]", i), Msg: "driver sources in git repositories are not available here"}
		}
		dfs, commit, err := opts.FetchDriver(src)
		if err != nil {
			return nil, &ConfigError{File: "styrmin.cue", Field: fmt.Sprintf("drivers[%d]", i), Msg: fmt.Sprintf("fetch %s@%s from %s (ref %s): %v", src.Name, src.Version, gitsource.PublicURL(src.URL), src.Ref, err), Err: err}
		}
		o := dopts
		// The driver's Source reaches its errors, the provenance of its
		// defaults and so plans and explain: never the URL's credentials,
		// which only the fetch above needs.
		o.Source = gitsource.PublicURL(src.URL) + "//" + src.Path + "@" + src.Ref
		d, err := drivers.Load(dfs, o)
		if err != nil {
			return nil, err
		}
		if d.Name != src.Name || d.Version != src.Version {
			return nil, &ConfigError{File: "styrmin.cue", Field: fmt.Sprintf("drivers[%d]", i), Msg: fmt.Sprintf("expected driver %s@%s, the source holds %s@%s", src.Name, src.Version, d.Name, d.Version)}
		}
		if err := cat.Add(d); err != nil {
			return nil, err
		}
		// The URL as given may carry a token; the lockfile never does.
		origins[d.Name+"@"+d.Version] = &DriverOrigin{URL: gitsource.PublicURL(src.URL), Ref: src.Ref, Path: src.Path, Commit: commit}
	}
	for _, d := range opts.ExtraDrivers {
		var dup *drivers.DuplicateError
		if err := cat.Add(d); err != nil && !errors.As(err, &dup) {
			return nil, err
		}
	}
	if pending == nil {
		locks, locksErr = LoadLocks(fsys)
	}
	if locksErr != nil {
		return nil, locksErr
	}
	if err := runsBroken(cat, locks); err != nil {
		return nil, err
	}
	return &Workspace{Repo: repo, Catalog: cat, Locks: locks, opts: opts, fsys: fsys, origins: origins}, nil
}

// runsBroken fails a keep-going load when a driver version a lock runs
// does not load: what that deployment's objects are is then unknown here,
// and the checks of the other deployments against them (a cluster-scoped
// object two of them render) would pass unchecked. A released version's
// folder is not to change; one that broke stops the lock whole, naming
// it. The first by deployment, so the same whatever the map's order.
func runsBroken(cat *drivers.Catalog, locks map[ID]*Instance) error {
	if len(cat.Broken()) == 0 {
		return nil
	}
	ids := make([]ID, 0, len(locks))
	for id := range locks {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	for _, id := range ids {
		in := locks[id]
		if in.Tombstone() || in.Driver.Name == "" {
			continue
		}
		if _, ok := cat.Get(in.Driver.Name, in.Driver.Version); ok {
			continue
		}
		if err := cat.BrokenVersion(in.Driver.Name, in.Driver.Version); err != nil {
			return &ConfigError{File: "drivers/" + in.Driver.Name + "/" + in.Driver.Version,
				Msg: fmt.Sprintf("%v; %s runs it (lockfile %s), and a driver version a deployment runs must load: nothing is locked until it does", err, id, id.LockPath()),
				Err: err}
		}
	}
	return nil
}

// Resolve resolves every deployment of the workspace.
func (w *Workspace) Resolve() *Result {
	return Resolve(w.Repo, Options{Catalog: w.Catalog, Locks: w.Locks, SourceCommit: w.opts.SourceCommit, DriverOrigins: w.origins, Progress: w.opts.Progress})
}

// LockPolicy says what to do when some deployments fail to resolve.
type LockPolicy int

const (
	// LockAllOrNothing locks nothing while any deployment fails: bad
	// input changes nothing. The default.
	LockAllOrNothing LockPolicy = iota
	// LockKeepGoing locks the deployments that resolved and reports the
	// others, so one broken deployment does not hold back a fan-out.
	LockKeepGoing
)

// Lock resolves the workspace and returns the lock changes under policy.
// With LockKeepGoing the returned error lists the deployments left out
// while the changes hold the others.
//
// The deletion rule applies (see DeletionRule): a lock that deletes more
// deployments than the threshold is refused with a
// *DeletionsRefusedError and no changes; LockAllowing allows more.
func (w *Workspace) Lock(policy LockPolicy) ([]LockChange, *Result, error) {
	return w.LockAllowing(policy, 0)
}

// LockAllowing is Lock that allows up to allowDeletions deletions above
// the threshold (styrminctl lock --allow-deletions N).
func (w *Workspace) LockAllowing(policy LockPolicy, allowDeletions int) ([]LockChange, *Result, error) {
	// Refused whole, under either policy, before anything resolves: Load
	// leaves it to the lock (CheckSharedBackupLocations).
	if err := CheckSharedBackupLocations(w.Repo); err != nil {
		return nil, nil, err
	}
	res := w.Resolve()
	if err := res.Err(); err != nil && policy == LockAllOrNothing {
		return nil, res, err
	}
	changes, err := planLocks(res, w.Locks, w.opts.Used, w.opts.Reused, w.opts.HeadLocks)
	if err != nil {
		return nil, res, err
	}
	if _, err := checkDeletions(w.Repo.Settings, changes, allowDeletions); err != nil {
		return nil, res, err
	}
	return changes, res, res.Err()
}

// LockRequest is what one lock may do beyond locking what the
// configuration changed.
type LockRequest struct {
	Policy LockPolicy
	// AllowDeletions allows up to this many deletions above the deletion
	// threshold.
	AllowDeletions int
	// Retry are deployments to lock again with the same instance, each
	// with the sequence its lock must still be at (see StillAt).
	Retry map[ID]int64
}

// LockOutcome is what a LockRequest locks.
type LockOutcome struct {
	// Changes are the lock changes of the configuration, Retries those
	// that lock an instance again; sorted by deployment each.
	Changes, Retries []LockChange
	// NotRetried are the deployments of the request's Retry whose lock
	// moved on since.
	NotRetried []ID
	// Skipped are the deployments that failed to resolve (LockKeepGoing).
	Skipped error
	// Warnings are what the configuration may not mean, though nothing
	// refuses it (SharedDomains).
	Warnings []string
}

// All is the changes and the retries.
func (o LockOutcome) All() []LockChange {
	return append(append([]LockChange(nil), o.Changes...), o.Retries...)
}

// LockFor locks what the configuration changed, under the deletion rule,
// and the retries the request asks for that the configuration does not
// lock anew anyway: the one place every lock path (lock, --commit,
// --push, lock mode, --retry-failed) decides what a lock writes. An error
// means nothing is to be written.
func (w *Workspace) LockFor(req LockRequest) (LockOutcome, error) {
	var out LockOutcome
	changes, _, rerr := w.LockAllowing(req.Policy, req.AllowDeletions)
	var refused *DeletionsRefusedError
	if errors.As(rerr, &refused) || (rerr != nil && req.Policy == LockAllOrNothing) {
		return out, rerr
	}
	still, moved := StillAt(w.Locks, req.Retry)
	retries, err := retryLocks(w.Locks, Unchanged(still, changes), w.opts.Used)
	if err != nil {
		return out, err
	}
	out.Changes, out.Retries, out.NotRetried, out.Skipped = changes, retries, moved, rerr
	out.Warnings = SharedDomains(w.Repo)
	return out, nil
}
