package instance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// LockSource gives a task the lockfile its lock records (spec.lock: the
// lock commit and the lockfile's path), for tasks that do not carry a
// copy, as stored: a task that waits keeps it so, a quarter of the
// instance decoded, and decodes it (DecodeLockFile) when it runs.
//
// LockFile returns a *LockNotFoundError when the commit or the file is
// not there: that needs a change in git. Any other error is taken as
// transient and retried.
type LockSource interface {
	LockFile(ctx context.Context, ref v1alpha1.LockRef) ([]byte, error)
}

// ReadLock returns the instance of ref from src, decoded (LockFile, then
// DecodeLockFile).
func ReadLock(ctx context.Context, src LockSource, ref v1alpha1.LockRef) (*resolver.Instance, error) {
	data, err := src.LockFile(ctx, ref)
	if err != nil {
		return nil, err
	}
	return DecodeLockFile(ref, data)
}

// DecodeLockFile decodes the lockfile of ref; one that does not decode is
// a *LockNotFoundError, as a lockfile at a commit does not change.
func DecodeLockFile(ref v1alpha1.LockRef, data []byte) (*resolver.Instance, error) {
	in, err := resolver.DecodeLock(ref.Path, data)
	if err != nil {
		return nil, &LockNotFoundError{Ref: ref, Err: err}
	}
	return in, nil
}

// LockNotFoundError reports a task's lock that cannot be had.
type LockNotFoundError struct {
	Ref v1alpha1.LockRef
	Err error
}

func (e *LockNotFoundError) Error() string {
	return fmt.Sprintf("lock %s at commit %s: %v", e.Ref.Path, e.Ref.Commit, e.Err)
}

func (e *LockNotFoundError) Unwrap() error { return e.Err }

// TreeReader is what RepoLocks reads: the files at a commit.
// *gitsource.Repo implements it.
type TreeReader interface {
	FS(commit gitsource.Hash) (fs.FS, error)
}

var _ TreeReader = (*gitsource.Repo)(nil)

// maxHandedOver bounds the lockfiles RepoLocks holds for tasks not yet
// run; past it none is kept, and those tasks read their lockfile from git
// when they run. A lock commit of 2,000 deployments once handed over
// 2,000 decoded lockfiles (11 MB), most of them kept for minutes while
// the first tasks ran; the tasks created first run first, and a lockfile
// read again costs a fraction of a millisecond.
const maxHandedOver = 256

// handOverTTL is how long a lockfile handed over waits for its task. One
// whose task never asks (deleted before it ran) would otherwise hold its
// place for good: when the map is full, those older than this go first.
const handOverTTL = 10 * time.Minute

// RepoLocks is the agent's LockSource: lockfiles read from its clone of
// the desired-state repository at the lock commit. The sync hands over the
// lockfiles it read for the tasks it created (HandOver), so a task's
// first run does not read its lockfile from git a second time; a
// restarted agent reads them from git.
//
// Tasks carry a reference to their lock rather than a copy of the
// instance: every write of a task (its creation and each status update)
// then costs the API server a third of what it did, which at hundreds of
// tasks a commit is the difference between the API server or the
// workloads setting the pace.
type RepoLocks struct {
	repo TreeReader

	mu     sync.Mutex
	handed map[v1alpha1.LockRef]handedOver
	// now is the clock of the hand-overs' ages (time.Now).
	now func() time.Time
	// last is the tree of the last commit read: a restarted agent's
	// tasks read their locks at a few commits, and a tree keeps the
	// folders it has read.
	lastCommit gitsource.Hash
	last       fs.FS

	// config bounds the evaluation of the configuration DeclaredPolicy
	// reads (nil: in-process).
	config *resolver.ConfigSandbox
	// declared are the environments' declarations read, by commit and
	// layer.
	declared map[policyKey]*resolver.Declared
}

var (
	_ LockSource   = (*RepoLocks)(nil)
	_ PolicySource = (*RepoLocks)(nil)
)

// NewRepoLocks returns a LockSource over repo.
func NewRepoLocks(repo TreeReader) *RepoLocks {
	return &RepoLocks{repo: repo, handed: map[v1alpha1.LockRef]handedOver{}, now: time.Now, declared: map[policyKey]*resolver.Declared{}}
}

// WithConfigSandbox makes DeclaredPolicy evaluate the configuration in c's
// sandbox first (see resolver.ConfigSandbox). It returns l.
func (l *RepoLocks) WithConfigSandbox(c *resolver.ConfigSandbox) *RepoLocks {
	l.config = c
	return l
}

// PolicySource gives the policy the configuration declares for an
// instance at its lock's commit (resolver.Loader.DeclaredPolicy). A
// *PolicyUnknownError means it cannot be had from that commit (the files
// do not load, the commit is gone): that needs a change in git. Any other
// error is taken as transient.
type PolicySource interface {
	DeclaredPolicy(ctx context.Context, ref v1alpha1.LockRef, in *resolver.Instance) (*drivers.Policy, error)
	// CheckInternal checks an internal instance against that
	// configuration and its driver (RepoLocks.CheckInternal).
	CheckInternal(ctx context.Context, ref v1alpha1.LockRef, in *resolver.Instance, drv *drivers.Driver) error
}

// PolicyUnknownError reports a lock commit whose configuration gives no
// policy for the instance.
type PolicyUnknownError struct {
	Ref v1alpha1.LockRef
	Err error
}

func (e *PolicyUnknownError) Error() string {
	return fmt.Sprintf("the configuration at lock commit %s: %v", e.Ref.Commit, e.Err)
}

func (e *PolicyUnknownError) Unwrap() error { return e.Err }

// UndeclaredError reports a lockfile that records for its deployment
// what the configuration at its lock commit does not give it: another
// namespace or release name (resolver.Declared.CheckPlacement), or, for
// an ingress controller, other settings, parameters or values
// (resolver.Loader.CheckIngressInstance). Written by hand, it needs a
// change in git.
type UndeclaredError struct {
	Ref v1alpha1.LockRef
	Err error
}

func (e *UndeclaredError) Error() string {
	commit := e.Ref.Commit
	if h, err := gitsource.ParseHash(commit); err == nil {
		commit = h.Short()
	}
	return fmt.Sprintf("%s at lock commit %s: %v", e.Ref.Path, commit, e.Err)
}

func (e *UndeclaredError) Unwrap() error { return e.Err }

// policyKey is what a declared policy depends on.
type policyKey struct {
	commit, cluster, environment, internal string
}

// maxPolicies bounds the policies RepoLocks remembers.
const maxPolicies = 1024

// DeclaredPolicy reads the cluster and environment files at ref's commit
// and returns the policy they give in (a commit's files never change, so
// they are read once per commit and environment). An application
// instance placed in another namespace than they give it is a
// *UndeclaredError.
func (l *RepoLocks) DeclaredPolicy(_ context.Context, ref v1alpha1.LockRef, in *resolver.Instance) (*drivers.Policy, error) {
	if in.Internal != "" {
		// An internal instance is checked as a whole (its name, namespace
		// and driver), not by its environment alone.
		fsys, err := l.commitTree(ref)
		if err != nil {
			return nil, err
		}
		p, err := resolver.NewLoader(0).WithSandbox(l.config).DeclaredInstancePolicy(fsys, in)
		return p, l.configErr(ref, err)
	}
	key := policyKey{ref.Commit, in.ID.Cluster, in.ID.Environment, in.Internal}
	l.mu.Lock()
	d, ok := l.declared[key]
	l.mu.Unlock()
	if !ok {
		fsys, err := l.commitTree(ref)
		if err != nil {
			return nil, err
		}
		d, err = resolver.NewLoader(0).WithSandbox(l.config).DeclaredEnvironment(fsys, in.ID)
		if err != nil {
			return nil, l.configErr(ref, err)
		}
		l.mu.Lock()
		if len(l.declared) >= maxPolicies {
			clear(l.declared)
		}
		l.declared[key] = d
		l.mu.Unlock()
	}
	if err := d.CheckPlacement(in); err != nil {
		return nil, &UndeclaredError{Ref: ref, Err: err}
	}
	return d.Policy, nil
}

// CheckInternal returns an *UndeclaredError when in, an internal
// instance, is not what the configuration at ref's commit resolves it to
// with drv, the driver version it records: an ingress controller applies
// as the agent, with every namespaced kind, so its lockfile's values must
// be those a lock of that configuration writes, not whatever a lockfile
// written by hand holds. Not cached: internal instances are few and
// change rarely.
//
// An evaluation that fails (a limit, a chart that does not render) is a
// *PolicyUnknownError, as a configuration that does not load: it needs a
// change in git. A sandbox that could not start, or a tree that could
// not be read, is the machine's trouble, returned as it is.
func (l *RepoLocks) CheckInternal(_ context.Context, ref v1alpha1.LockRef, in *resolver.Instance, drv *drivers.Driver) error {
	if in.Internal != resolver.InternalIngress {
		return nil
	}
	fsys, err := l.commitTree(ref)
	if err != nil {
		return err
	}
	err = resolver.NewLoader(0).WithSandbox(l.config).CheckIngressInstance(fsys, in, drv)
	switch _, undeclared := errors.AsType[*resolver.UndeclaredError](err); {
	case undeclared:
		return &UndeclaredError{Ref: ref, Err: err}
	case err == nil, errors.Is(err, drivers.ErrSandboxStart):
		return err
	}
	// A configuration that does not load, or an evaluation that fails.
	return &PolicyUnknownError{Ref: ref, Err: err}
}

// commitTree is the tree of ref's commit.
func (l *RepoLocks) commitTree(ref v1alpha1.LockRef) (fs.FS, error) {
	commit, err := gitsource.ParseHash(ref.Commit)
	if err != nil {
		return nil, &PolicyUnknownError{Ref: ref, Err: err}
	}
	fsys, err := l.tree(commit)
	if errors.Is(err, gitsource.ErrCommitNotFound) {
		return nil, &PolicyUnknownError{Ref: ref, Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("the configuration at lock commit %s: %w", ref.Commit, err)
	}
	return fsys, nil
}

// configErr classifies an error of reading the configuration at ref's
// commit: files that do not load are a *PolicyUnknownError.
func (l *RepoLocks) configErr(ref v1alpha1.LockRef, err error) error {
	if err == nil {
		return nil
	}
	var ce *resolver.ConfigError
	if errors.As(err, &ce) || errors.Is(err, fs.ErrNotExist) {
		return &PolicyUnknownError{Ref: ref, Err: err}
	}
	return fmt.Errorf("the configuration at lock commit %s: %w", ref.Commit, err)
}

// handedOver is a lockfile handed over and when.
type handedOver struct {
	data []byte
	at   time.Time
}

// HandOver keeps data, the lockfile of ref as read, for the first
// LockFile of ref, unless maxHandedOver are kept already (and none of
// them is older than handOverTTL). The caller gives up data: whoever asks
// for ref first gets it as it is.
func (l *RepoLocks) HandOver(ref v1alpha1.LockRef, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if len(l.handed) >= maxHandedOver {
		for r, h := range l.handed {
			if now.Sub(h.at) > handOverTTL {
				delete(l.handed, r)
			}
		}
	}
	if len(l.handed) < maxHandedOver {
		l.handed[ref] = handedOver{data: data, at: now}
	}
}

// tree returns the files at commit, reusing the last commit's tree.
func (l *RepoLocks) tree(commit gitsource.Hash) (fs.FS, error) {
	l.mu.Lock()
	last, lastCommit := l.last, l.lastCommit
	l.mu.Unlock()
	if last != nil && lastCommit == commit {
		return last, nil
	}
	// Not under l.mu: the repository's own lock can be held by a fetch.
	fsys, err := l.repo.FS(commit)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.lastCommit, l.last = commit, fsys
	l.mu.Unlock()
	return fsys, nil
}

// Drop forgets the lockfile handed over for ref (its task was not
// created).
func (l *RepoLocks) Drop(ref v1alpha1.LockRef) {
	l.mu.Lock()
	delete(l.handed, ref)
	l.mu.Unlock()
}

// Lock returns the instance of ref decoded (ReadLock).
func (l *RepoLocks) Lock(ctx context.Context, ref v1alpha1.LockRef) (*resolver.Instance, error) {
	return ReadLock(ctx, l, ref)
}

// LockFile returns the lockfile of ref: the one handed over, else the
// lockfile read from git.
func (l *RepoLocks) LockFile(_ context.Context, ref v1alpha1.LockRef) ([]byte, error) {
	l.mu.Lock()
	h, ok := l.handed[ref]
	delete(l.handed, ref)
	l.mu.Unlock()
	if ok {
		return h.data, nil
	}
	commit, err := gitsource.ParseHash(ref.Commit)
	if err != nil {
		return nil, &LockNotFoundError{Ref: ref, Err: err}
	}
	if !fs.ValidPath(ref.Path) {
		return nil, &LockNotFoundError{Ref: ref, Err: errors.New("not a valid path in the repository")}
	}
	fsys, err := l.tree(commit)
	if errors.Is(err, gitsource.ErrCommitNotFound) {
		// History rewritten, or a task created from another repository.
		return nil, &LockNotFoundError{Ref: ref, Err: err}
	}
	if err != nil {
		// A commit the clone could not fetch (gitsource.ErrNotFetched: the
		// remote failed during a leader handover) is not known gone: the
		// task is retried, not failed.
		return nil, fmt.Errorf("lock %s at commit %s: %w", ref.Path, ref.Commit, err)
	}
	data, err := resolver.ReadLockFile(fsys, ref.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &LockNotFoundError{Ref: ref, Err: errors.New("no such file at that commit")}
	}
	if errors.Is(err, resolver.ErrUnreadable) {
		// The clone failed to give it (too many open files, an object
		// not read): the world may change, and reading it again may work.
		return nil, fmt.Errorf("lock %s at commit %s: %w", ref.Path, ref.Commit, err)
	}
	if err != nil {
		// At a commit, which does not change: a link, a folder or a file
		// too big needs a change in git (as one that does not decode).
		return nil, &LockNotFoundError{Ref: ref, Err: err}
	}
	return data, nil
}
