package driversource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/outcome"
	"github.com/styrmin/styrmin/resolver"
)

// Source gives the controllers the exact driver version an instance
// was resolved with. The agent backs it with its clone of the
// desired-state repository and the driver repositories; tests with a
// catalog loaded from the examples.
//
// Driver returns a *DriverNotFoundError when the source does not hold the
// version (or holds different content) and a *DriverLoadError when it does
// not load: both need a change in git. Any other error is taken as
// transient. Callers go through Get, which classifies them.
type Source interface {
	Driver(ctx context.Context, req Request) (*drivers.Driver, error)
}

// Request asks a Source for the driver version an instance pins.
type Request struct {
	// Ref is the instance's driver; a Ref with a Source is fetched from
	// that repository at the recorded commit.
	Ref resolver.DriverRef
	// Commit is the desired-state repository's commit whose drivers/
	// folder holds an in-repository driver: the task's lock commit or the
	// instance's source commit, where the instance was resolved. Empty:
	// the fetched head.
	Commit string
}

// DriverNotFoundError reports a driver version the source does not hold,
// or holds with a different digest than the instance pinned.
type DriverNotFoundError struct {
	Ref resolver.DriverRef
	// Digest is the digest of the version found, when it differs.
	Digest string
	// Err says more when there is more to say (the commit is gone).
	Err error
}

func (e *DriverNotFoundError) Error() string {
	where := "the driver source"
	if s := e.Ref.Source; s != nil {
		where = fmt.Sprintf("%s at commit %s (ref %s, folder %s)", gitsource.PublicURL(s.URL), s.Commit, s.Ref, s.Path)
	}
	switch {
	case e.Digest != "":
		return fmt.Sprintf("driver %s@%s: the instance pins digest %s but %s holds %s", e.Ref.Name, e.Ref.Version, e.Ref.Digest, where, e.Digest)
	case e.Err != nil:
		return fmt.Sprintf("driver %s@%s: not found in %s: %v", e.Ref.Name, e.Ref.Version, where, e.Err)
	}
	return fmt.Sprintf("driver %s@%s: not found in %s", e.Ref.Name, e.Ref.Version, where)
}

func (e *DriverNotFoundError) Unwrap() error { return e.Err }

// CatalogSource is a Source over a loaded catalog.
type CatalogSource struct {
	Catalog *drivers.Catalog
}

var _ Source = (*CatalogSource)(nil)

// Driver returns the catalog's version of ref, checking its digest when
// ref pins one.
func (s *CatalogSource) Driver(_ context.Context, req Request) (*drivers.Driver, error) {
	ref := req.Ref
	d, ok := s.Catalog.Get(ref.Name, ref.Version)
	if !ok {
		return nil, &DriverNotFoundError{Ref: ref}
	}
	if ref.Digest != "" && d.Digest != ref.Digest {
		return nil, &DriverNotFoundError{Ref: ref, Digest: d.Digest}
	}
	return d, nil
}

// DriverRepo is what RepoDrivers reads: the tracked head and the files at
// a commit. *gitsource.Repo implements it.
type DriverRepo interface {
	Head() (gitsource.Hash, error)
	FS(commit gitsource.Hash) (fs.FS, error)
}

var _ DriverRepo = (*gitsource.Repo)(nil)

// RepoDrivers is the agent's Source: the drivers kept in the
// desired-state repository (drivers/<name>/<version>/), read at the commit
// the instance was resolved or locked at (not the head, which may have
// dropped the folder since), and the drivers kept in other repositories,
// fetched at the commit their lock recorded (Remote). A version once
// loaded stays available (keyed by its digest), so it is read once while
// the agent lives.
//
// Loads are per driver version: requests for a version being loaded wait
// for that one load (their own context still ends their wait), and loads
// of different versions run side by side, so a driver that is slow to
// load (up to its time limit) holds back only the deployments that use
// it.
type RepoDrivers struct {
	repo   DriverRepo
	remote *RemoteTrees
	opts   LoadOptions

	mu       sync.Mutex
	loaded   map[string]*drivers.Driver // name@version@digest
	inflight map[string]*loading        // by the request's key
}

// loading is one load in progress; done is closed when d or err is set.
type loading struct {
	done chan struct{}
	d    *drivers.Driver
	err  error
}

// LoadOptions are how RepoDrivers loads a driver version.
type LoadOptions struct {
	// Limits bound each load and render; a limit styrmin.cue sets at the
	// commit read (in-repository drivers) may lower them, not raise them:
	// the agent's are what its memory and its deployments can afford.
	Limits drivers.Limits
	// Sandbox, when set, evaluates drivers in a child process.
	Sandbox *drivers.Sandbox
	// Config, when set, bounds the evaluation of the repository's own
	// configuration the agent reads (styrmin.cue for the limits, the
	// layers for sensitive values) in Sandbox's children (NewAgent makes
	// it from Sandbox and Limits).
	Config *resolver.ConfigSandbox
}

var _ Source = (*RepoDrivers)(nil)

// NewRepoDrivers returns a Source over repo and, for drivers kept in other
// repositories, remote (nil: such a driver is not found).
func NewRepoDrivers(repo DriverRepo, remote *RemoteTrees, opts LoadOptions) *RepoDrivers {
	return &RepoDrivers{repo: repo, remote: remote, opts: opts, loaded: map[string]*drivers.Driver{}, inflight: map[string]*loading{}}
}

// Driver returns the driver version req pins.
func (s *RepoDrivers) Driver(ctx context.Context, req Request) (*drivers.Driver, error) {
	ref := req.Ref
	key := ref.Name + "@" + ref.Version + "@" + ref.Digest
	if ref.Name == "" || ref.Version == "" {
		return nil, &DriverNotFoundError{Ref: ref}
	}
	s.mu.Lock()
	if d, ok := s.loaded[key]; ok {
		s.mu.Unlock()
		return d, nil
	}
	l, ok := s.inflight[key]
	if !ok {
		l = &loading{done: make(chan struct{})}
		s.inflight[key] = l
		// The load is shared: it must not end with the context of the
		// request that happened to start it (its time limit bounds it).
		go s.run(context.WithoutCancel(ctx), req, key, l)
	}
	s.mu.Unlock()
	select {
	case <-l.done:
		return l.d, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run loads req's driver version for everyone waiting on l, without the
// lock: a fetch or a load of one driver does not hold back the others. A
// failed load is not kept, so the next request tries again (the error may
// be a failed fetch).
func (s *RepoDrivers) run(ctx context.Context, req Request, key string, l *loading) {
	l.d, l.err = s.fetchAndLoad(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, key)
	if l.err == nil {
		s.loaded[req.Ref.Name+"@"+req.Ref.Version+"@"+l.d.Digest] = l.d
		s.loaded[key] = l.d
	}
	close(l.done)
}

func (s *RepoDrivers) fetchAndLoad(ctx context.Context, req Request) (*drivers.Driver, error) {
	ref := req.Ref
	var (
		fsys fs.FS
		dir  string
		err  error
	)
	opts := s.opts
	if ref.Source != nil {
		if err := s.checkDeclared(req); err != nil {
			return nil, err
		}
		fsys, dir, err = s.external(ctx, ref)
	} else {
		fsys, dir, err = s.inRepo(req)
		if err == nil {
			opts.Limits, err = repoLimits(resolver.NewLoader(0).WithSandbox(opts.Config), fsys, ref, opts.Limits)
		}
	}
	if err != nil {
		return nil, err
	}
	return load(ctx, fsys, dir, ref, opts)
}

// repoLimits lowers the agent's limits to those styrmin.cue sets in fsys.
func repoLimits(l *resolver.Loader, fsys fs.FS, ref resolver.DriverRef, agent drivers.Limits) (drivers.Limits, error) {
	set, err := l.LoadSettings(fsys)
	if err != nil {
		return agent, &DriverLoadError{Ref: ref, Err: err}
	}
	repo, err := set.DriverLimits()
	if err != nil {
		return agent, &DriverLoadError{Ref: ref, Err: err}
	}
	return agent.WithDefaults().Cap(repo), nil
}

// inRepo returns the tree and folder of an in-repository driver (see
// tree).
func (s *RepoDrivers) inRepo(req Request) (fs.FS, string, error) {
	ref := req.Ref
	dir := path.Join("drivers", ref.Name, ref.Version)
	if !fs.ValidPath(dir) {
		return nil, "", &DriverNotFoundError{Ref: ref}
	}
	fsys, _, err := s.tree(req)
	return fsys, dir, err
}

// tree returns the desired-state repository's files at the request's
// commit, or at the head when there is none or the clone no longer has it
// (history rewritten by a force push; the digest check still holds the
// content to what the instance pinned), with the commit read.
func (s *RepoDrivers) tree(req Request) (fs.FS, gitsource.Hash, error) {
	ref := req.Ref
	if h, err := gitsource.ParseHash(req.Commit); err == nil {
		fsys, err := s.repo.FS(h)
		if err == nil {
			return fsys, h, nil
		}
		if !errors.Is(err, gitsource.ErrCommitNotFound) {
			return nil, h, fmt.Errorf("driver %s@%s at %s: %w", ref.Name, ref.Version, h.Short(), err)
		}
	}
	head, err := s.repo.Head()
	if err != nil {
		return nil, head, fmt.Errorf("driver %s@%s: %w", ref.Name, ref.Version, err)
	}
	fsys, err := s.repo.FS(head)
	if err != nil {
		return nil, head, fmt.Errorf("driver %s@%s: %w", ref.Name, ref.Version, err)
	}
	return fsys, head, nil
}

// checkDeclared refuses a driver source that styrmin.cue does not list
// where the request reads the repository (tree): the agent fetches the URL
// a lockfile records, and a lockfile written by hand (with a valid
// checksum) could otherwise point its git client at any address it can
// reach (a service inside the cluster, a file:// path), past whoever
// reviews styrmin.cue. A lock records the URL of the styrmin.cue entry
// without credentials (gitsource.PublicURL), so that is what is compared.
func (s *RepoDrivers) checkDeclared(req Request) error {
	ref := req.Ref
	fsys, commit, err := s.tree(req)
	if err != nil {
		return err
	}
	set, err := resolver.NewLoader(0).WithSandbox(s.opts.Config).LoadSettings(fsys)
	if err != nil {
		return &DriverLoadError{Ref: ref, Err: err}
	}
	declared := make([]string, 0, len(set.Drivers))
	for _, d := range set.Drivers {
		u := gitsource.PublicURL(d.URL)
		if u == ref.Source.URL {
			return nil
		}
		declared = append(declared, u)
	}
	return &UndeclaredSourceError{Ref: ref, Commit: commit, Declared: declared}
}

// UndeclaredSourceError reports a lockfile whose driver.source.url is none
// of the driver sources styrmin.cue declares at the commit the agent read
// it at: the lockfile was not written by a lock of that configuration.
// Nothing is fetched from it.
type UndeclaredSourceError struct {
	Ref resolver.DriverRef
	// Commit is the desired-state repository's commit read.
	Commit gitsource.Hash
	// Declared are the URLs its styrmin.cue lists (without credentials).
	Declared []string
}

func (e *UndeclaredSourceError) Error() string {
	declared := "lists no driver sources"
	if len(e.Declared) > 0 {
		declared = "lists " + strings.Join(e.Declared, ", ")
	}
	return fmt.Sprintf("driver %s@%s: the lockfile's driver.source.url %q is not a driver source of styrmin.cue at commit %s, which %s: the agent fetches only the repositories styrmin.cue lists; add the source there and lock the deployment again",
		e.Ref.Name, e.Ref.Version, gitsource.PublicURL(e.Ref.Source.URL), e.Commit.Short(), declared)
}

// external returns the tree and folder of a driver kept in another
// repository, at the commit its lock recorded.
func (s *RepoDrivers) external(ctx context.Context, ref resolver.DriverRef) (fs.FS, string, error) {
	src := ref.Source
	dir := path.Clean(src.Path)
	commit, err := gitsource.ParseHash(src.Commit)
	if err != nil || s.remote == nil || src.URL == "" || !fs.ValidPath(dir) {
		return nil, "", &DriverNotFoundError{Ref: ref}
	}
	fsys, err := s.remote.Tree(ctx, src.URL, commit)
	if errors.Is(err, gitsource.ErrCommitNotFound) {
		return nil, "", &DriverNotFoundError{Ref: ref, Err: err}
	}
	if err != nil {
		return nil, "", fmt.Errorf("driver %s@%s from %s: %w", ref.Name, ref.Version, gitsource.PublicURL(src.URL), err)
	}
	return fsys, dir, nil
}

// load loads the driver in folder dir of fsys and checks it is the version
// and the content ref pins.
func load(ctx context.Context, fsys fs.FS, dir string, ref resolver.DriverRef, opts LoadOptions) (*drivers.Driver, error) {
	if _, err := fs.Stat(fsys, dir); errors.Is(err, fs.ErrNotExist) {
		return nil, &DriverNotFoundError{Ref: ref}
	} else if err != nil {
		return nil, fmt.Errorf("driver %s@%s: %w", ref.Name, ref.Version, err)
	}
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, err
	}
	source := dir
	if ref.Source != nil {
		source = ref.Source.URL + "//" + dir + "@" + ref.Source.Commit
	}
	d, err := drivers.Load(sub, drivers.LoadOptions{Source: source, Limits: opts.Limits, Sandbox: opts.Sandbox, Context: ctx})
	if err != nil {
		return nil, &DriverLoadError{Ref: ref, Err: err}
	}
	if d.Name != ref.Name || d.Version != ref.Version {
		return nil, &DriverNotFoundError{Ref: ref, Err: fmt.Errorf("%s holds %s@%s", source, d.Name, d.Version)}
	}
	if ref.Digest != "" && d.Digest != ref.Digest {
		return nil, &DriverNotFoundError{Ref: ref, Digest: d.Digest}
	}
	return d, nil
}

// DriverLoadError reports a driver folder that exists but does not load:
// it needs a change in git.
type DriverLoadError struct {
	Ref resolver.DriverRef
	Err error
}

func (e *DriverLoadError) Error() string {
	return fmt.Sprintf("driver %s@%s: %v", e.Ref.Name, e.Ref.Version, e.Err)
}

func (e *DriverLoadError) Unwrap() error { return e.Err }

// Get returns the driver version req pins from src, with its error
// classified where it happens: a version that is missing, holds other
// content or does not load is stalled (it needs a change in git) with
// reason DriverNotFound; anything else is retryable with reason
// DriverUnavailable. Both controllers load drivers through it, so one
// load error is treated alike by both.
func Get(ctx context.Context, src Source, req Request) (*drivers.Driver, error) {
	d, err := src.Driver(ctx, req)
	if err == nil {
		return d, nil
	}
	return nil, Classify(err)
}

// Classify classifies an error of a Source (see Get), or of fetching a
// driver source to lock it: a ref or commit the remote does not have, or a
// folder missing from it, is stalled like a missing version; a repository
// over what a fetch may hold in memory, like a driver over its limits.
func Classify(err error) error {
	if errors.Is(err, drivers.ErrSandboxStart) {
		// The machine's trouble (a process or pipe limit), not the
		// driver's: a load that could not start its sandbox may work in
		// a minute.
		return outcome.Retryable(v1alpha1.ReasonDriverUnavailable, err)
	}
	var fl *gitsource.FetchLimitError
	if errors.Is(err, drivers.ErrLimit) || errors.As(err, &fl) {
		// A driver repository over what a fetch may hold is a limit
		// like a driver's own: fetching it again changes nothing.
		return outcome.Stalled(v1alpha1.ReasonDriverLimitExceeded, err)
	}
	var nf *DriverNotFoundError
	var le *DriverLoadError
	var se *drivers.SpecError
	var ue *UndeclaredSourceError
	if errors.As(err, &nf) || errors.As(err, &le) || errors.As(err, &se) || errors.As(err, &ue) || errors.Is(err, drivers.ErrUnknownDriver) || errors.Is(err, drivers.ErrLimit) ||
		errors.Is(err, gitsource.ErrCommitNotFound) || errors.Is(err, fs.ErrNotExist) {
		return outcome.Stalled(v1alpha1.ReasonDriverNotFound, err)
	}
	return outcome.Retryable(v1alpha1.ReasonDriverUnavailable, err)
}

// SensitiveSource finds the values of an instance's sensitive parameters,
// which its lockfile (and so the StyrminDeployment) holds only as
// placeholders. A Source that also implements it lets the agent apply
// deployments with sensitive parameters.
type SensitiveSource interface {
	Sensitive(ctx context.Context, in *resolver.Instance, d *drivers.Driver) (resolver.Sensitive, error)
}

var _ SensitiveSource = (*RepoDrivers)(nil)

// Sensitive reads the values behind the instance's placeholders from the
// configuration at the commit it was resolved from, else at the fetched
// head (a lock of an uncommitted working tree names the commit it was
// based on): where their author wrote them, the one place they are in
// clear. resolver.RevealSensitive checks each value against its
// placeholder, so a commit that gives other values is never used.
func (s *RepoDrivers) Sensitive(_ context.Context, in *resolver.Instance, d *drivers.Driver) (resolver.Sensitive, error) {
	if !resolver.HasPlaceholders(in) {
		return nil, nil
	}
	var commits []gitsource.Hash
	if h, err := gitsource.ParseHash(in.SourceCommit); err == nil {
		commits = append(commits, h)
	}
	if h, err := s.repo.Head(); err == nil && (len(commits) == 0 || commits[0] != h) {
		commits = append(commits, h)
	}
	var errs []error
	for _, h := range commits {
		fsys, err := s.repo.FS(h)
		if err != nil {
			errs = append(errs, fmt.Errorf("sensitive parameters of %s at %s: %w", in.ID, h.Short(), err))
			continue
		}
		values, err := resolver.NewLoader(0).WithSandbox(s.opts.Config).RevealSensitiveFS(fsys, d, in)
		if err == nil {
			return values, nil
		}
		errs = append(errs, fmt.Errorf("at %s: %w", h.Short(), err))
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("sensitive parameters of %s: no commit to read them at", in.ID)
	}
	return nil, errors.Join(errs...)
}

// ClassifyRender classifies a render's error, as both controllers render:
// a sandbox that could not be started is the machine's trouble and
// retryable (a change that fails over it would leave the deployment
// behind, failed, once the machine recovers); anything else is the
// driver's or the instance's and stalled, with reason RenderFailed.
func ClassifyRender(err error) error {
	if errors.Is(err, drivers.ErrSandboxStart) {
		return outcome.Retryable(v1alpha1.ReasonRenderFailed, err)
	}
	return outcome.Stalled(v1alpha1.ReasonRenderFailed, err)
}
