package driversource

import (
	"container/list"
	"context"
	"io/fs"
	"sync"
	"time"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/resolver"
)

// Defaults of RemoteTrees.
const (
	// DefaultMaxTrees bounds the fetched trees kept in memory: driver
	// repositories are small, and an agent runs few driver commits at once.
	DefaultMaxTrees = 8
	// DefaultMaxTreeBytes bounds the bytes of the fetched trees kept
	// (treeBytes): one fetch's worth (gitsource.DefaultMaxFetchBytes), an
	// eighth of the agent's default memory. A fetch may hold that much,
	// and eight of them kept would be the agent's whole memory.
	DefaultMaxTreeBytes = gitsource.DefaultMaxFetchBytes
	// DefaultFetchTimeout bounds one fetch of a driver repository.
	DefaultFetchTimeout = 2 * time.Minute
)

// Fetcher fetches the tree of one commit of a remote repository.
// Remotes.FetchCommit implements it with the agent's credentials.
type Fetcher func(ctx context.Context, url string, commit gitsource.Hash) (fs.FS, error)

// RemoteTrees keeps the trees of driver repositories fetched at the commits
// instances recorded: each (URL, commit) is fetched once, the tasks and
// deployments that ask for it meanwhile wait for that one fetch, and the
// least recently used trees are dropped beyond a count and a byte bound (a
// tree larger than the byte bound is used, not kept). A failed fetch is
// not kept: the next request tries again.
type RemoteTrees struct {
	fetch    Fetcher
	max      int
	maxBytes int64
	timeout  time.Duration

	mu    sync.Mutex
	trees map[treeKey]*list.Element // of *tree
	lru   *list.List                // fetched trees, most recently used first
	bytes int64                     // treeBytes of the fetched trees kept
}

type treeKey struct {
	url    string
	commit gitsource.Hash
}

// tree is one fetch; done is closed when fsys or err is set.
type tree struct {
	key   treeKey
	done  chan struct{}
	fsys  fs.FS
	err   error
	bytes int64 // treeBytes(fsys), once kept
}

// RemoteTreesOptions configures NewRemoteTrees.
type RemoteTreesOptions struct {
	// MaxTrees bounds the trees kept (default DefaultMaxTrees).
	MaxTrees int
	// MaxBytes bounds the bytes of the trees kept (default
	// DefaultMaxTreeBytes); see treeBytes.
	MaxBytes int64
	// FetchTimeout bounds one fetch (default DefaultFetchTimeout).
	FetchTimeout time.Duration
}

// NewRemoteTrees returns a cache of the trees fetch returns.
func NewRemoteTrees(fetch Fetcher, opts RemoteTreesOptions) *RemoteTrees {
	if opts.MaxTrees <= 0 {
		opts.MaxTrees = DefaultMaxTrees
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxTreeBytes
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = DefaultFetchTimeout
	}
	return &RemoteTrees{fetch: fetch, max: opts.MaxTrees, maxBytes: opts.MaxBytes, timeout: opts.FetchTimeout,
		trees: map[treeKey]*list.Element{}, lru: list.New()}
}

// Tree returns the tree of commit of the repository at url, fetching it
// unless it is kept or being fetched.
func (c *RemoteTrees) Tree(ctx context.Context, url string, commit gitsource.Hash) (fs.FS, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := treeKey{url: url, commit: commit}
	c.mu.Lock()
	el, ok := c.trees[key]
	if ok {
		c.lru.MoveToFront(el)
	} else {
		el = c.lru.PushFront(&tree{key: key, done: make(chan struct{})})
		c.trees[key] = el
		// The fetch is shared: it must not end with the context of the
		// request that happened to start it.
		go c.run(context.WithoutCancel(ctx), el.Value.(*tree))
	}
	t := el.Value.(*tree)
	c.mu.Unlock()
	select {
	case <-t.done:
		return t.fsys, t.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run fetches t, then keeps it (dropping the least recently used fetched
// trees beyond the bounds) or forgets it when the fetch failed or the
// tree alone is over the byte bound.
func (c *RemoteTrees) run(ctx context.Context, t *tree) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	fsys, err := c.fetch(ctx, t.key.url, t.key.commit)
	var n int64
	if err == nil {
		n = treeBytes(fsys)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t.fsys, t.err = fsys, err
	close(t.done)
	if err != nil || n > c.maxBytes {
		c.remove(t.key)
		return
	}
	t.bytes = n
	c.bytes += n
	for el := c.lru.Back(); el != nil && (c.lru.Len() > c.max || c.bytes > c.maxBytes); {
		prev := el.Prev()
		if old := el.Value.(*tree); isDone(old) {
			c.remove(old.key)
		}
		el = prev
	}
}

// remove drops key; c.mu is held.
func (c *RemoteTrees) remove(key treeKey) {
	if el, ok := c.trees[key]; ok {
		c.bytes -= el.Value.(*tree).bytes
		c.lru.Remove(el)
		delete(c.trees, key)
	}
}

// Len is the number of trees kept or being fetched.
func (c *RemoteTrees) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Bytes is the treeBytes of the trees kept.
func (c *RemoteTrees) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// treeEntryBytes is what a fetched tree holds for a file or folder besides
// the file's content: its entry in its folder's tree and its object.
const treeEntryBytes = 256

// treeBytes is about what fsys holds in memory: the size of its files,
// and treeEntryBytes for each entry (gitsource keeps only the fetched
// commit's tree, so that is what a fetch leaves).
func treeBytes(fsys fs.FS) int64 {
	var n int64
	_ = fs.WalkDir(fsys, ".", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // counted as far as it could be read
		}
		n += treeEntryBytes
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func isDone(t *tree) bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Remotes fetches driver repositories with the credentials of the
// desired-state repository. They are sent only to a remote on the same
// protocol and host as that repository (gitsource.SameHost): styrmin.cue
// may name any URL, and whoever can commit there must not be able to make
// the agent hand its token to a host they control. Other remotes are
// fetched without credentials. A fetch holds at most MaxFetchBytes in
// memory (a commit no ref points at may take a few fetches in turn, from
// deeper history, each within it: gitsource.FetchTreeWithin).
type Remotes struct {
	// RepoURL is the desired-state repository's URL.
	RepoURL string
	// Auth are its credentials.
	Auth gitsource.Auth
	// Credentials, when set, gives its credentials now instead of Auth
	// (read again from their Secret: a rotated token).
	Credentials func() gitsource.Auth
	// MaxFetchBytes bounds what one fetch holds in memory
	// (gitsource.DefaultMaxFetchBytes when 0).
	MaxFetchBytes int64
}

// AuthFor returns the credentials to fetch url with.
func (r Remotes) AuthFor(url string) gitsource.Auth {
	if gitsource.SameHost(r.RepoURL, url) {
		if r.Credentials != nil {
			return r.Credentials()
		}
		return r.Auth
	}
	return gitsource.Auth{}
}

// FetchCommit fetches commit of the repository at url (a Fetcher).
func (r Remotes) FetchCommit(ctx context.Context, url string, commit gitsource.Hash) (fs.FS, error) {
	return gitsource.FetchCommitWithin(ctx, url, commit, r.AuthFor(url), r.MaxFetchBytes)
}

// LockFetcher is the resolver's DriverFetcher for the agent's lock mode:
// each driver source at its ref, with the commit it resolved to.
func (r Remotes) LockFetcher(ctx context.Context) resolver.DriverFetcher {
	return func(src resolver.DriverSource) (fs.FS, string, error) {
		// The error names the remote already (without credentials), and
		// the resolver names the styrmin.cue entry.
		fsys, commit, err := gitsource.FetchTreeWithin(ctx, src.URL, src.Ref, src.Path, r.AuthFor(src.URL), r.MaxFetchBytes)
		if err != nil {
			return nil, "", err
		}
		return fsys, commit.String(), nil
	}
}
