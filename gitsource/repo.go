package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Repo is a git repository opened or cloned by this package. In remote mode
// (Clone, or Open with OpenOptions.Remote) it tracks one branch of one
// remote: Fetch updates the remote-tracking ref and CommitLocks pushes. In
// local mode (Open without a remote) CommitLocks commits onto the local
// branch.
//
// A Repo is safe for concurrent use: go-git is not, so every access to the
// repository is serialised by a mutex held by the Repo. File systems returned
// by FS read whole files under that mutex and are safe for concurrent use too.
// A fetch waits on the network without the mutex (it takes it for each
// read, and to store the pack and move the ref once the download ended),
// so a stalled remote blocks no reader; a push holds it, and every network
// operation has a deadline (NetworkTimeout), so a remote that stalls a
// push blocks readers for a bounded time at most.
type Repo struct {
	mu sync.Mutex
	// fetchMu runs fetches one at a time; a fetch holds r.mu only to read
	// and to store what it fetched.
	fetchMu sync.Mutex

	repo   *git.Repository
	storer storage.Storer

	branch string // short branch name
	// upstream is the branch of the remote that the local branch named
	// branch tracks, when its name differs ("" otherwise; Open only).
	upstream   string
	remoteName string // "" in local mode
	remoteURL  string
	// rawURL is the remote's URL as configured, credentials and all: what
	// SetAuth works the credentials out from again.
	rawURL string
	// authMu guards auth: SetAuth replaces it while the repository is read.
	authMu   sync.RWMutex
	auth     transport.AuthMethod
	caBundle []byte
	insecure bool
	timeout  time.Duration // NetworkTimeout; 0: DefaultNetworkTimeout

	worktreeDir string // "" for bare and in-memory repositories

	// ownBranch is set for clones made by Clone: nobody else uses their
	// local branch, so it is kept at the remote-tracking ref and "main" or
	// "HEAD" resolve to what was last fetched or pushed.
	ownBranch bool

	// seqCache is the last answer of LockedSequences (guarded by mu).
	seqCache *sequenceCache
	// held are Holds' answers at the head they were given at (guarded by
	// mu).
	held *heldCommits
}

// Compile-time checks that Repo implements the package's interfaces.
var (
	_ Reader  = (*Repo)(nil)
	_ Fetcher = (*Repo)(nil)
	_ Walker  = (*Repo)(nil)
	_ Writer  = (*Repo)(nil)
)

// OpenOptions configures Open.
type OpenOptions struct {
	// Remote names a configured remote ("origin") to fetch from and push
	// to. Empty opens the repository in local mode: no network, and
	// CommitLocks commits onto the local branch (and its worktree).
	Remote string
	// Branch is the branch to track. Default: the branch HEAD points to.
	Branch string
	// Auth holds the remote's credentials.
	Auth Auth
	// CABundle holds extra PEM certificates trusted for an https remote.
	CABundle []byte
	// InsecureSkipTLS disables TLS verification for an https remote.
	InsecureSkipTLS bool
	// ObjectCacheSize bounds, in bytes, the decoded objects kept in memory
	// for a bare repository opened at its own path (the agent's clone);
	// 0 keeps go-git's default (96 MiB). See CloneOptions.ObjectCacheSize.
	ObjectCacheSize int64
	// NetworkTimeout bounds each network operation (a fetch, a push,
	// listing the remote's refs) whose context has no deadline; 0 means
	// DefaultNetworkTimeout.
	NetworkTimeout time.Duration
}

// DefaultNetworkTimeout bounds a network operation whose context has no
// deadline: a remote that accepts the connection and then sends nothing
// would otherwise stall the caller, and the Repo's readers waiting for it,
// forever. It is the whole operation's bound, not an idle one, so it is
// generous: a stall ends within it, and a clone of a large repository
// over a slow link still fits (raise CloneOptions.NetworkTimeout, the
// agent's --git-timeout, for one that does not).
const DefaultNetworkTimeout = 10 * time.Minute

// networkContext is ctx bounded by timeout (0: DefaultNetworkTimeout)
// unless it has a deadline already.
func networkContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	if timeout <= 0 {
		timeout = DefaultNetworkTimeout
	}
	return context.WithTimeout(ctx, timeout)
}

// Open opens the repository that contains path (path may be a subdirectory
// of a worktree, a worktree added with `git worktree add`, or a bare
// repository).
func Open(path string, opts OpenOptions) (*Repo, error) {
	// A bare repository is only found at its own path; a worktree also from
	// any directory below it.
	gr, err := git.PlainOpenWithOptions(path, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if errors.Is(err, git.ErrRepositoryNotExists) {
		gr, err = git.PlainOpenWithOptions(path, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true})
	}
	if err != nil {
		return nil, fmt.Errorf("gitsource: open %s: %w", path, err)
	}
	wt, err := gr.Worktree()
	switch {
	case errors.Is(err, git.ErrIsBareRepository) && opts.ObjectCacheSize > 0:
		if gr, err = reopenBare(gr, path, opts.ObjectCacheSize); err != nil {
			return nil, fmt.Errorf("gitsource: open %s: %w", path, err)
		}
	case err != nil && !errors.Is(err, git.ErrIsBareRepository):
		return nil, fmt.Errorf("gitsource: open %s: worktree: %w", path, err)
	}
	r := &Repo{repo: gr, storer: gr.Storer, caBundle: opts.CABundle, insecure: opts.InsecureSkipTLS, timeout: opts.NetworkTimeout}
	if wt != nil {
		r.worktreeDir = wt.Filesystem.Root()
	}

	r.branch = opts.Branch
	if r.branch == "" {
		head, err := gr.Storer.Reference(plumbing.HEAD)
		if err != nil {
			return nil, fmt.Errorf("gitsource: open %s: read HEAD: %w", path, err)
		}
		// A detached HEAD (a CI checkout) leaves no branch: reading works,
		// Head, Fetch and CommitLocks ask for OpenOptions.Branch.
		if head.Type() == plumbing.SymbolicReference && head.Target().IsBranch() {
			r.branch = head.Target().Short()
		}
	} else if err := checkBranchName(r.branch); err != nil {
		return nil, fmt.Errorf("gitsource: open %s: %w", path, err)
	}

	if opts.Remote == "" {
		if !opts.Auth.isZero() || opts.CABundle != nil || opts.InsecureSkipTLS {
			return nil, fmt.Errorf("gitsource: open %s: remote credentials or TLS settings given without OpenOptions.Remote", path)
		}
		return r, nil
	}
	rem, err := gr.Remote(opts.Remote)
	if err != nil {
		return nil, fmt.Errorf("gitsource: open %s: remote %q: %w", path, opts.Remote, err)
	}
	urls := rem.Config().URLs
	if len(urls) == 0 {
		return nil, fmt.Errorf("gitsource: open %s: remote %q has no URL", path, opts.Remote)
	}
	r.remoteName = opts.Remote
	r.upstream = upstreamName(gr, r.branch, opts.Remote)
	// Credentials in the configured URL go to r.auth, and only the URL
	// without them to go-git (Auth.remote).
	if r.remoteURL, r.auth, err = opts.Auth.remote(urls[0]); err != nil {
		return nil, err
	}
	r.rawURL = urls[0]
	return r, nil
}

// SetAuth replaces the remote's credentials: a token rotated in its
// Secret (an installation token expires within the hour) is used from the
// next fetch or push, without opening the repository again. Credentials
// in the remote's URL count as they did when it was opened (Auth's win).
func (r *Repo) SetAuth(a Auth) error {
	if r.remoteName == "" {
		return errors.New("gitsource: set credentials: the repository has no remote (local mode)")
	}
	_, m, err := a.remote(r.rawURL)
	if err != nil {
		return err
	}
	r.authMu.Lock()
	r.auth = m
	r.authMu.Unlock()
	return nil
}

// authMethod is the remote's credentials now.
func (r *Repo) authMethod() transport.AuthMethod {
	r.authMu.RLock()
	defer r.authMu.RUnlock()
	return r.auth
}

// upstreamName is the branch of remote that the local branch tracks
// (branch.<name>.remote and .merge), when its name is not branch's: a
// local branch "work" made with --track origin/main. "" otherwise.
func upstreamName(gr *git.Repository, branch, remote string) string {
	if branch == "" {
		return ""
	}
	cfg, err := gr.Config()
	if err != nil {
		return ""
	}
	b, ok := cfg.Branches[branch]
	if !ok || b.Remote != remote || !b.Merge.IsBranch() || b.Merge.Short() == branch {
		return ""
	}
	return b.Merge.Short()
}

// CloneOptions configures Clone.
type CloneOptions struct {
	// Branch is the branch to clone and track. Default: the remote's HEAD.
	Branch string
	// Auth holds the remote's credentials.
	Auth Auth
	// CABundle holds extra PEM certificates trusted for an https remote.
	CABundle []byte
	// InsecureSkipTLS disables TLS verification for an https remote.
	InsecureSkipTLS bool
	// ObjectCacheSize bounds, in bytes, the decoded objects a clone on
	// disk keeps in memory; 0 keeps go-git's default (96 MiB). A
	// long-running reader (the agent) reads most objects once (each lock
	// commit's new lockfiles), so a large cache only fills with them: at
	// 2,000 deployments a fan-out's lockfiles and the packs' delta bases
	// held 12 MB of the agent's heap after two commits, and it kept
	// growing towards the default with every commit.
	ObjectCacheSize int64
	// NetworkTimeout bounds the clone, and then each fetch and push of
	// the Repo, when the context has no deadline; 0 means
	// DefaultNetworkTimeout.
	NetworkTimeout time.Duration
}

// Clone clones one branch of url (an https or ssh URL, or a local path) into
// dir, or into memory when dir is "". The clone is bare: files are read
// through FS, never checked out. The remote is named "origin".
//
// Local paths are served by go-git's file transport, which runs the
// git-upload-pack and git-receive-pack programs of the installed git.
// Without a deadline in ctx the clone gives up after
// CloneOptions.NetworkTimeout.
func Clone(ctx context.Context, url, dir string, opts CloneOptions) (*Repo, error) {
	// From here on url holds no credentials: those it held are in auth.
	rawURL := url
	url, auth, err := opts.Auth.remote(url)
	if err != nil {
		return nil, err
	}
	co := &git.CloneOptions{
		URL:             url,
		Auth:            auth,
		RemoteName:      git.DefaultRemoteName,
		SingleBranch:    true,
		NoCheckout:      true,
		Tags:            git.NoTags,
		CABundle:        opts.CABundle,
		InsecureSkipTLS: opts.InsecureSkipTLS,
	}
	if opts.Branch != "" {
		if err := checkBranchName(opts.Branch); err != nil {
			return nil, fmt.Errorf("gitsource: clone %s: %w", redactURL(url), err)
		}
		co.ReferenceName = plumbing.NewBranchReferenceName(opts.Branch)
	}
	var gr *git.Repository
	cloneCtx, cancel := networkContext(ctx, opts.NetworkTimeout)
	defer cancel()
	co.ProxyOptions = sshDeadline(cloneCtx, url)
	if dir == "" {
		gr, err = git.CloneContext(cloneCtx, memory.NewStorage(), nil, co)
	} else {
		gr, err = git.PlainCloneContext(cloneCtx, dir, true, co)
	}
	if err != nil {
		if errors.Is(err, git.NoMatchingRefSpecError{}) || errors.Is(err, plumbing.ErrReferenceNotFound) {
			err = fmt.Errorf("%w: %q: %w", ErrBranchNotFound, opts.Branch, err)
		}
		return nil, transportError("clone", url, err)
	}
	if dir != "" && opts.ObjectCacheSize > 0 {
		// go-git's clone has no cache option: the clone is read afresh
		// through a storage of the size asked for.
		if gr, err = reopenBare(gr, dir, opts.ObjectCacheSize); err != nil {
			return nil, fmt.Errorf("gitsource: clone %s: %w", redactURL(url), err)
		}
	}
	head, err := gr.Head()
	if err != nil {
		return nil, fmt.Errorf("gitsource: clone %s: read HEAD: %w", redactURL(url), err)
	}
	if !head.Name().IsBranch() {
		return nil, fmt.Errorf("gitsource: clone %s: remote HEAD is not a branch; set CloneOptions.Branch", redactURL(url))
	}
	r := &Repo{
		repo:       gr,
		storer:     gr.Storer,
		branch:     head.Name().Short(),
		remoteName: git.DefaultRemoteName,
		remoteURL:  url,
		rawURL:     rawURL,
		auth:       auth,
		caBundle:   opts.CABundle,
		insecure:   opts.InsecureSkipTLS,
		timeout:    opts.NetworkTimeout,
		ownBranch:  true,
	}
	// go-git names the remote-tracking ref after HEAD when no branch is
	// given; Fetch and Head use refs/remotes/origin/<branch>.
	if err := gr.Storer.SetReference(plumbing.NewHashReference(r.trackingRef(), head.Hash())); err != nil {
		return nil, fmt.Errorf("gitsource: clone %s: %w", redactURL(url), err)
	}
	return r, nil
}

// reopenBare opens the bare repository gr holds at dir again, with an
// object cache of cacheSize bytes, and closes gr's storage (the packfiles
// it may hold open): go-git's PlainOpen and PlainClone take no cache.
func reopenBare(gr *git.Repository, dir string, cacheSize int64) (*git.Repository, error) {
	if c, ok := gr.Storer.(io.Closer); ok {
		_ = c.Close()
	}
	s := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRU(cache.FileSize(cacheSize)))
	return git.Open(s, nil)
}

// Branch returns the short name of the tracked branch, "" when a Repo was
// opened on a detached HEAD without OpenOptions.Branch.
func (r *Repo) Branch() string { return r.branch }

// WorktreeDir returns the root of the repository's worktree, or "" for a
// bare or in-memory repository. Read uncommitted files with os.DirFS on it.
func (r *Repo) WorktreeDir() string { return r.worktreeDir }

// RemoteURL returns the URL of the tracked remote with any credentials
// removed, or "" in local mode.
func (r *Repo) RemoteURL() string {
	if r.remoteName == "" {
		return ""
	}
	return redactURL(r.remoteURL)
}

// trackingRef is the ref holding the tracked branch's head: the
// remote-tracking ref in remote mode, the branch itself in local mode.
func (r *Repo) trackingRef() plumbing.ReferenceName {
	if r.remoteName == "" {
		return plumbing.NewBranchReferenceName(r.branch)
	}
	return plumbing.NewRemoteReferenceName(r.remoteName, r.branch)
}

// Head returns the head of the tracked branch as last fetched (remote mode)
// or as it is now (local mode). It does not touch the network. An unborn or
// unfetched branch gives an error wrapping ErrBranchNotFound.
func (r *Repo) Head() (Hash, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.headLocked()
}

func (r *Repo) headLocked() (Hash, error) {
	if err := r.requireBranch("head"); err != nil {
		return Hash{}, err
	}
	h, err := r.refHash(r.trackingRef())
	if err != nil {
		return Hash{}, err
	}
	if h.IsZero() {
		return Hash{}, fmt.Errorf("gitsource: head of %s: %w", r.trackingRef(), ErrBranchNotFound)
	}
	return h, nil
}

// refHash returns the hash a ref points to, or zero when it does not exist.
func (r *Repo) refHash(name plumbing.ReferenceName) (Hash, error) {
	ref, err := r.storer.Reference(name)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return Hash{}, nil
	}
	if err != nil {
		return Hash{}, fmt.Errorf("gitsource: read %s: %w", name, err)
	}
	if ref.Type() != plumbing.HashReference {
		return Hash{}, fmt.Errorf("gitsource: %s is a symbolic reference", name)
	}
	return fromPlumbing(ref.Hash()), nil
}

// FetchResult reports what Fetch saw.
type FetchResult struct {
	// Previous is the branch head before the fetch (zero if never fetched).
	Previous Hash
	// Head is the branch head on the remote now.
	Head Hash
	// Moved reports whether Head differs from Previous.
	Moved bool
}

// Fetch brings the tracked branch up to date with the remote. When the
// remote head has not moved it costs one round trip (the ref advertisement)
// and transfers no objects. A branch missing on the remote gives an error
// wrapping ErrBranchNotFound. Without a deadline in ctx, the fetch gives
// up after the NetworkTimeout of the Repo's options.
func (r *Repo) Fetch(ctx context.Context) (FetchResult, error) {
	if r.remoteName == "" {
		return FetchResult{}, fmt.Errorf("gitsource: fetch: %w", ErrNoRemote)
	}
	if err := r.requireBranch("fetch"); err != nil {
		return FetchResult{}, err
	}
	prev, head, err := r.fetch(ctx)
	if err != nil {
		return FetchResult{}, err
	}
	if head.IsZero() {
		return FetchResult{}, fmt.Errorf("gitsource: fetch %s from %s: %w", r.branch, redactURL(r.remoteURL), ErrBranchNotFound)
	}
	return FetchResult{Previous: prev, Head: head, Moved: head != prev}, nil
}

// fetch brings the remote-tracking ref up to date and returns it before
// and after (head zero: the branch is not on the remote).
//
// The remote's head is asked for first (the ref advertisement, all an
// unmoved fetch costs). Only when it moved are objects fetched. Neither
// holds r.mu while it waits on the network: go-git runs over a fetchStore,
// which takes r.mu for each read and spools the pack aside, and the pack
// and the ref are written under r.mu once the download has ended. A host
// that answers the ref list and then stalls in the pack held every reader,
// of commits the clone holds too, for the whole network timeout. Fetches
// run one at a time (r.fetchMu), so that an older answer never replaces a
// newer one.
func (r *Repo) fetch(ctx context.Context) (prev, head Hash, err error) {
	ctx, cancel := networkContext(ctx, r.timeout)
	defer cancel()
	remote, err := r.lsRemote(ctx, "fetch")
	if err != nil {
		return Hash{}, Hash{}, err
	}
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()
	r.mu.Lock()
	prev, err = r.refHash(r.trackingRef())
	r.mu.Unlock()
	if err != nil {
		return Hash{}, Hash{}, err
	}
	if !remote.IsZero() && fromPlumbing(remote) == prev {
		return prev, prev, nil
	}
	if err := ctx.Err(); err != nil {
		// It waited for another fetch until its own time was up.
		return Hash{}, Hash{}, transportError("fetch", r.remoteURL, err)
	}
	head, err = r.fetchObjects(ctx, prev)
	return prev, head, err
}

// fetchObjects fetches the tracked branch into its remote-tracking ref,
// which was at prev, and returns its head, zero when the branch does not
// exist on the remote. The caller holds r.fetchMu, not r.mu.
func (r *Repo) fetchObjects(ctx context.Context, prev Hash) (Hash, error) {
	r.mu.Lock()
	rem, err := r.repo.Remote(r.remoteName)
	r.mu.Unlock()
	if err != nil {
		return Hash{}, fmt.Errorf("gitsource: remote %q: %w", r.remoteName, err)
	}
	st := newFetchStore(&r.mu, r.storer)
	defer st.discard()
	spec := config.RefSpec(fmt.Sprintf("+%s:%s", plumbing.NewBranchReferenceName(r.branch), r.trackingRef()))
	err = git.NewRemote(st, rem.Config()).FetchContext(ctx, &git.FetchOptions{
		RemoteName:      r.remoteName,
		RemoteURL:       r.remoteURL,
		RefSpecs:        []config.RefSpec{spec},
		Auth:            r.authMethod(),
		Tags:            git.NoTags,
		CABundle:        r.caBundle,
		InsecureSkipTLS: r.insecure,
		ProxyOptions:    sshDeadline(ctx, r.remoteURL),
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
	case errors.Is(err, git.NoMatchingRefSpecError{}), errors.Is(err, transport.ErrEmptyRemoteRepository):
		// The branch does not exist on the remote (yet).
		return Hash{}, r.moveTracking(prev, Hash{})
	default:
		return Hash{}, transportError("fetch", r.remoteURL, err)
	}
	if err := st.store(); err != nil {
		return Hash{}, err
	}
	head := prev
	if ref, ok := st.refs[r.trackingRef()]; ok {
		head = fromPlumbing(ref.Hash())
	}
	if err := r.moveTracking(prev, head); err != nil {
		return Hash{}, err
	}
	// A push may have moved the ref meanwhile: it holds the newer head.
	if head, err = r.refHash(r.trackingRef()); err != nil {
		return Hash{}, err
	}
	return head, r.syncOwnBranch(head)
}

// moveTracking moves the remote-tracking ref from prev to head (zero:
// removes it), unless it is no longer at prev: a push made since the
// fetch began moved it to what it pushed, which the fetch's answer may
// predate. The caller holds r.mu.
func (r *Repo) moveTracking(prev, head Hash) error {
	name := r.trackingRef()
	cur, err := r.refHash(name)
	if err != nil || cur != prev || cur == head {
		return err
	}
	if head.IsZero() {
		err = r.storer.RemoveReference(name)
	} else {
		err = r.storer.SetReference(plumbing.NewHashReference(name, head.plumbing()))
	}
	if err != nil {
		return fmt.Errorf("gitsource: update %s: %w", name, err)
	}
	return nil
}

// syncOwnBranch moves the local branch of a Clone to head.
func (r *Repo) syncOwnBranch(head Hash) error {
	if !r.ownBranch || head.IsZero() {
		return nil
	}
	name := plumbing.NewBranchReferenceName(r.branch)
	if err := r.storer.SetReference(plumbing.NewHashReference(name, head.plumbing())); err != nil {
		return fmt.Errorf("gitsource: update %s: %w", name, err)
	}
	return nil
}

// Resolve resolves a revision ("main", "origin/main", "HEAD~2", a full or
// abbreviated hash, a tag) to a commit.
func (r *Repo) Resolve(rev string) (Hash, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return Hash{}, fmt.Errorf("gitsource: resolve %q: %w", rev, err)
	}
	if _, err := object.GetCommit(r.storer, *h); err != nil {
		return Hash{}, fmt.Errorf("gitsource: resolve %q: %s is not a commit: %w", rev, h, err)
	}
	return fromPlumbing(*h), nil
}

// requireBranch fails when the Repo tracks no branch (detached HEAD).
func (r *Repo) requireBranch(op string) error {
	if r.branch == "" {
		return fmt.Errorf("gitsource: %s: HEAD is detached and no branch was given; set OpenOptions.Branch", op)
	}
	return nil
}

// checkBranchName rejects names that cannot be a branch.
func checkBranchName(name string) error {
	ref := plumbing.NewBranchReferenceName(name)
	if err := ref.Validate(); err != nil || strings.HasPrefix(name, "refs/") || strings.HasPrefix(name, "-") || filepath.IsAbs(name) {
		return fmt.Errorf("invalid branch name %q", name)
	}
	return nil
}
