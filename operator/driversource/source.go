package driversource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
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
	Driver(ctx context.Context, ref resolver.DriverRef) (*drivers.Driver, error)
}

// DriverNotFoundError reports a driver version the source does not hold,
// or holds with a different digest than the instance pinned.
type DriverNotFoundError struct {
	Ref resolver.DriverRef
	// Digest is the digest of the version found, when it differs.
	Digest string
}

func (e *DriverNotFoundError) Error() string {
	if e.Digest != "" {
		return fmt.Sprintf("driver %s@%s: the instance pins digest %s but the source holds %s", e.Ref.Name, e.Ref.Version, e.Ref.Digest, e.Digest)
	}
	return fmt.Sprintf("driver %s@%s: not found in the driver source", e.Ref.Name, e.Ref.Version)
}

// CatalogSource is a Source over a loaded catalog.
type CatalogSource struct {
	Catalog *drivers.Catalog
}

var _ Source = (*CatalogSource)(nil)

// Driver returns the catalog's version of ref, checking its digest when
// ref pins one.
func (s *CatalogSource) Driver(_ context.Context, ref resolver.DriverRef) (*drivers.Driver, error) {
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
// desired-state repository (drivers/<name>/<version>/), read at the
// fetched head. A version once loaded stays available (keyed by its
// digest), so an instance whose driver folder was since removed from the
// branch still runs while the agent lives.
type RepoDrivers struct {
	repo DriverRepo

	mu     sync.Mutex
	loaded map[string]*drivers.Driver // name@version@digest
}

var _ Source = (*RepoDrivers)(nil)

// NewRepoDrivers returns a Source over repo.
func NewRepoDrivers(repo DriverRepo) *RepoDrivers {
	return &RepoDrivers{repo: repo, loaded: map[string]*drivers.Driver{}}
}

// Driver returns the driver version ref pins.
func (s *RepoDrivers) Driver(_ context.Context, ref resolver.DriverRef) (*drivers.Driver, error) {
	key := ref.Name + "@" + ref.Version + "@" + ref.Digest
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.loaded[key]; ok {
		return d, nil
	}
	head, err := s.repo.Head()
	if err != nil {
		return nil, fmt.Errorf("driver %s@%s: %w", ref.Name, ref.Version, err)
	}
	fsys, err := s.repo.FS(head)
	if err != nil {
		return nil, fmt.Errorf("driver %s@%s: %w", ref.Name, ref.Version, err)
	}
	dir := path.Join("drivers", ref.Name, ref.Version)
	if !fs.ValidPath(dir) || ref.Name == "" || ref.Version == "" {
		return nil, &DriverNotFoundError{Ref: ref}
	}
	if _, err := fs.Stat(fsys, dir); errors.Is(err, fs.ErrNotExist) {
		return nil, &DriverNotFoundError{Ref: ref}
	}
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, err
	}
	d, err := drivers.Load(sub, drivers.LoadOptions{Source: dir})
	if err != nil {
		return nil, &DriverLoadError{Ref: ref, Err: err}
	}
	if ref.Digest != "" && d.Digest != ref.Digest {
		return nil, &DriverNotFoundError{Ref: ref, Digest: d.Digest}
	}
	s.loaded[ref.Name+"@"+ref.Version+"@"+d.Digest] = d
	s.loaded[key] = d
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

// Get returns the driver version ref pins from src, with its error
// classified where it happens: a version that is missing, holds other
// content or does not load is stalled (it needs a change in git) with
// reason DriverNotFound; anything else is retryable with reason
// DriverUnavailable. Both controllers load drivers through it, so one
// load error is treated alike by both.
func Get(ctx context.Context, src Source, ref resolver.DriverRef) (*drivers.Driver, error) {
	d, err := src.Driver(ctx, ref)
	if err == nil {
		return d, nil
	}
	return nil, Classify(err)
}

// Classify classifies an error of a Source (see Get).
func Classify(err error) error {
	var nf *DriverNotFoundError
	var le *DriverLoadError
	var se *drivers.SpecError
	if errors.As(err, &nf) || errors.As(err, &le) || errors.As(err, &se) || errors.Is(err, drivers.ErrUnknownDriver) {
		return outcome.Stalled(v1alpha1.ReasonDriverNotFound, err)
	}
	return outcome.Retryable(v1alpha1.ReasonDriverUnavailable, err)
}
