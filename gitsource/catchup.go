package gitsource

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"time"
)

// CatchUpSource is what CatchUp reads and fetches: a clone (*Repo, *Folder).
type CatchUpSource interface {
	Fetcher
	FS(commit Hash) (fs.FS, error)
}

var (
	_ CatchUpSource = (*Repo)(nil)
	_ CatchUpSource = (*Folder)(nil)
)

// CatchUp reads a clone's trees and fetches it when asked for a commit it
// does not hold yet. An agent elected after another, or whose syncer has
// not fetched since a push, is handed commits its clone has never seen
// (a task made by the earlier leader, a lock the webhook announced):
// without a fetch they read as gone for good, and the change fails. One
// fetch serves every reader that misses meanwhile, and after it none is
// made again for Every, so a commit that is really gone (history
// rewritten) costs at most one fetch per interval.
type CatchUp struct {
	src CatchUpSource
	// every is the least time between two fetches; timeout bounds one.
	every, timeout time.Duration
	now            func() time.Time

	mu       sync.Mutex
	last     time.Time
	inflight chan struct{}
}

var _ CatchUpSource = (*CatchUp)(nil)

// CatchUpOptions configure NewCatchUp.
type CatchUpOptions struct {
	// Every is the least time between two fetches (default 30 s).
	Every time.Duration
	// Timeout bounds one fetch (default 30 s): a reader waits for it.
	Timeout time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// NewCatchUp returns a CatchUp over src.
func NewCatchUp(src CatchUpSource, o CatchUpOptions) *CatchUp {
	if o.Every <= 0 {
		o.Every = 30 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &CatchUp{src: src, every: o.Every, timeout: o.Timeout, now: o.Now}
}

// FS returns the tree of commit, fetching first when the clone does not
// hold it (see CatchUp). ErrCommitNotFound still means the remote's branch
// does not hold it either, or a fetch was made too recently to ask again.
func (c *CatchUp) FS(commit Hash) (fs.FS, error) {
	fsys, err := c.src.FS(commit)
	if !errors.Is(err, ErrCommitNotFound) || !c.fetched() {
		return fsys, err
	}
	return c.src.FS(commit)
}

// Head returns the tracked branch head as last fetched.
func (c *CatchUp) Head() (Hash, error) { return c.src.Head() }

// Fetch fetches the clone (the syncer's own fetches go through it too, and
// count as the last fetch).
func (c *CatchUp) Fetch(ctx context.Context) (FetchResult, error) {
	res, err := c.src.Fetch(ctx)
	if err == nil {
		c.mu.Lock()
		c.last = c.now()
		c.mu.Unlock()
	}
	return res, err
}

// fetched fetches, or waits for the fetch in flight, unless one ended
// within every; it reports whether a fetch was made or awaited.
func (c *CatchUp) fetched() bool {
	c.mu.Lock()
	if ch := c.inflight; ch != nil {
		c.mu.Unlock()
		<-ch
		return true
	}
	if !c.last.IsZero() && c.now().Sub(c.last) < c.every {
		c.mu.Unlock()
		return false
	}
	ch := make(chan struct{})
	c.inflight = ch
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	_, err := c.src.Fetch(ctx)
	cancel()
	c.mu.Lock()
	c.inflight = nil
	// A failed fetch counts too: a remote that is down is not asked by
	// every reader that misses.
	c.last = c.now()
	c.mu.Unlock()
	close(ch)
	return err == nil
}
