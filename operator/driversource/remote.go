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
	// DefaultFetchTimeout bounds one fetch of a driver repository.
	DefaultFetchTimeout = 2 * time.Minute
)

// Fetcher fetches the tree of one commit of a remote repository.
// Remotes.FetchCommit implements it with the agent's credentials.
type Fetcher func(ctx context.Context, url string, commit gitsource.Hash) (fs.FS, error)

// RemoteTrees keeps the trees of driver repositories fetched at the commits
// instances recorded: each (URL, commit) is fetched once, the tasks and
// deployments that ask for it meanwhile wait for that one fetch, and the
// least recently used trees are dropped beyond a bound. A failed fetch is
// not kept: the next request tries again.
type RemoteTrees struct {
	fetch   Fetcher
	max     int
	timeout time.Duration

	mu    sync.Mutex
	trees map[treeKey]*list.Element // of *tree
	lru   *list.List                // fetched trees, most recently used first
}

type treeKey struct {
	url    string
	commit gitsource.Hash
}

// tree is one fetch; done is closed when fsys or err is set.
type tree struct {
	key  treeKey
	done chan struct{}
	fsys fs.FS
	err  error
}

// RemoteTreesOptions configures NewRemoteTrees.
type RemoteTreesOptions struct {
	// MaxTrees bounds the trees kept (default DefaultMaxTrees).
	MaxTrees int
	// FetchTimeout bounds one fetch (default DefaultFetchTimeout).
	FetchTimeout time.Duration
}

// NewRemoteTrees returns a cache of the trees fetch returns.
func NewRemoteTrees(fetch Fetcher, opts RemoteTreesOptions) *RemoteTrees {
	if opts.MaxTrees <= 0 {
		opts.MaxTrees = DefaultMaxTrees
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = DefaultFetchTimeout
	}
	return &RemoteTrees{fetch: fetch, max: opts.MaxTrees, timeout: opts.FetchTimeout, trees: map[treeKey]*list.Element{}, lru: list.New()}
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

// run fetches t, then keeps it (dropping the oldest fetched trees beyond
// the bound) or forgets it when the fetch failed.
func (c *RemoteTrees) run(ctx context.Context, t *tree) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	fsys, err := c.fetch(ctx, t.key.url, t.key.commit)
	c.mu.Lock()
	defer c.mu.Unlock()
	t.fsys, t.err = fsys, err
	close(t.done)
	if err != nil {
		c.remove(t.key)
		return
	}
	for el := c.lru.Back(); el != nil && c.lru.Len() > c.max; {
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
// fetched without credentials.
type Remotes struct {
	// RepoURL is the desired-state repository's URL.
	RepoURL string
	// Auth are its credentials.
	Auth gitsource.Auth
}

// AuthFor returns the credentials to fetch url with.
func (r Remotes) AuthFor(url string) gitsource.Auth {
	if gitsource.SameHost(r.RepoURL, url) {
		return r.Auth
	}
	return gitsource.Auth{}
}

// FetchCommit fetches commit of the repository at url (a Fetcher).
func (r Remotes) FetchCommit(ctx context.Context, url string, commit gitsource.Hash) (fs.FS, error) {
	return gitsource.FetchCommit(ctx, url, commit, r.AuthFor(url))
}

// LockFetcher is the resolver's DriverFetcher for the agent's lock mode:
// each driver source at its ref, with the commit it resolved to.
func (r Remotes) LockFetcher(ctx context.Context) resolver.DriverFetcher {
	return func(src resolver.DriverSource) (fs.FS, string, error) {
		// The error names the remote already (without credentials), and
		// the resolver names the styrmin.cue entry.
		fsys, commit, err := gitsource.FetchTree(ctx, src.URL, src.Ref, src.Path, r.AuthFor(src.URL))
		if err != nil {
			return nil, "", err
		}
		return fsys, commit.String(), nil
	}
}
