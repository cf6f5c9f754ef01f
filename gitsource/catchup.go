package gitsource

import (
	"context"
	"errors"
	"fmt"
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

// ErrNotFetched means a commit the clone does not hold could not be
// looked for on the remote: the fetch made for it failed, or one failed
// too recently to ask again. Unlike ErrCommitNotFound it says nothing of
// the commit, which may well be on the remote: retry.
var ErrNotFetched = errors.New("not in the clone, and the remote could not be asked for it")

// CatchUp reads a clone's trees and fetches it when asked for a commit it
// does not hold yet. An agent elected after another, or whose syncer has
// not fetched since a push, is handed commits its clone has never seen
// (a task made by the earlier leader, a lock the webhook announced):
// without a fetch they read as gone for good, and the change fails. One
// fetch serves every reader that misses meanwhile, and after it none is
// made again for Every, so a commit that is really gone (history
// rewritten) costs at most one fetch per interval.
//
// A reader waits for the fetch only until it has run Wait: a remote that
// does not answer held every reader that missed for the whole fetch's
// timeout (ten minutes by default), each a worker of the task or
// StyrminDeployment controller, so that a replica elected with an old
// clone while the git host hung ran nothing, for any deployment, for as
// long as the host hung. Past Wait a miss is ErrNotFetched at once, and
// the fetch goes on, bounded by its timeout.
//
// A commit is reported gone (ErrCommitNotFound) only when a fetch
// succeeded: the one made or awaited for the miss, or one within Every
// before it. When the last fetch failed (a remote down or slow during a
// leader handover) a miss is ErrNotFetched, which callers retry: taken
// as gone, it failed a task for good, though nothing was wrong in git.
type CatchUp struct {
	src CatchUpSource
	// every is the least time between two fetches; timeout bounds one;
	// wait bounds how long after its start a reader waits for one.
	every, timeout, wait time.Duration
	now                  func() time.Time

	mu sync.Mutex
	// last is when the last fetch ended, lastErr its error (nil: it
	// succeeded).
	last     time.Time
	lastErr  error
	inflight *catchUpFetch
}

// catchUpFetch is a fetch in flight: err is set before done is closed;
// began is when it started (the process's clock, not Now).
type catchUpFetch struct {
	done  chan struct{}
	began time.Time
	err   error
}

var _ CatchUpSource = (*CatchUp)(nil)

// CatchUpOptions configure NewCatchUp.
type CatchUpOptions struct {
	// Every is the least time between two fetches (default 30 s).
	Every time.Duration
	// Timeout bounds one fetch; a reader waits for it. The agent passes
	// its --git-timeout, the bound of its other fetches (default
	// DefaultNetworkTimeout, as theirs).
	Timeout time.Duration
	// Wait bounds how long after a fetch began a reader waits for it
	// (default DefaultCatchUpWait).
	Wait time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// DefaultCatchUpWait is how long after a fetch began a reader that missed
// waits for it by default: a fetch that brings a few commits takes a
// second or two, one over a slow link tens of seconds (a reader that gives
// up sooner is retried, but its StyrminDeployment may say meanwhile that
// its driver is unavailable).
const DefaultCatchUpWait = 30 * time.Second

// NewCatchUp returns a CatchUp over src.
func NewCatchUp(src CatchUpSource, o CatchUpOptions) *CatchUp {
	if o.Every <= 0 {
		o.Every = 30 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultNetworkTimeout
	}
	if o.Wait <= 0 {
		o.Wait = DefaultCatchUpWait
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &CatchUp{src: src, every: o.Every, timeout: o.Timeout, wait: o.Wait, now: o.Now}
}

// FS returns the tree of commit, fetching first when the clone does not
// hold it (see CatchUp). ErrCommitNotFound means a fetch that succeeded
// did not bring it either (or one succeeded too recently to ask again);
// ErrNotFetched that the remote could not be asked.
func (c *CatchUp) FS(commit Hash) (fs.FS, error) {
	fsys, err := c.src.FS(commit)
	if !errors.Is(err, ErrCommitNotFound) {
		return fsys, err
	}
	if err := c.fetched(); err != nil {
		return nil, fmt.Errorf("gitsource: commit %s: %w", commit, err)
	}
	// Read again even when no fetch was made: one that ended since the
	// first read (the syncer's) may have brought it.
	return c.src.FS(commit)
}

// Head returns the tracked branch head as last fetched.
func (c *CatchUp) Head() (Hash, error) { return c.src.Head() }

// Fetch fetches the clone (the syncer's own fetches go through it too, and
// count as the last fetch, failed or not).
func (c *CatchUp) Fetch(ctx context.Context) (FetchResult, error) {
	res, err := c.src.Fetch(ctx)
	if !errors.Is(ctx.Err(), context.Canceled) {
		// A fetch cut short by its caller (the syncer stopping) says
		// nothing of the remote; one that ran out of time does.
		c.mu.Lock()
		c.last, c.lastErr = c.now(), err
		c.mu.Unlock()
	}
	return res, err
}

// fetched fetches, or waits for the fetch in flight, unless one ended
// within every; it returns nil when that fetch succeeded, an error
// wrapping ErrNotFetched when it failed or had not ended Wait after it
// began (it goes on in the background).
func (c *CatchUp) fetched() error {
	c.mu.Lock()
	if f := c.inflight; f != nil {
		c.mu.Unlock()
		return c.await(f)
	}
	if !c.last.IsZero() && c.now().Sub(c.last) < c.every {
		// A remote that is down is not asked by every reader that
		// misses; but its failure is not taken as an answer.
		last, err := c.last, c.lastErr
		c.mu.Unlock()
		if err != nil {
			return fmt.Errorf("%w: the last fetch, at %s, failed, and the next is made after %s: %w",
				ErrNotFetched, last.UTC().Format(time.RFC3339), c.every, maskNotFound(err))
		}
		return nil
	}
	f := &catchUpFetch{done: make(chan struct{}), began: time.Now()}
	c.inflight = f
	c.mu.Unlock()
	go c.fetch(f)
	return c.await(f)
}

// fetch runs fetch f, bounded by the timeout, and records its end.
func (c *CatchUp) fetch(f *catchUpFetch) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	_, f.err = c.src.Fetch(ctx)
	cancel()
	c.mu.Lock()
	c.inflight = nil
	c.last, c.lastErr = c.now(), f.err
	c.mu.Unlock()
	close(f.done)
}

// await waits for fetch f until it has run Wait: its outcome (see
// fetched), or an error wrapping ErrNotFetched once it has run that long.
func (c *CatchUp) await(f *catchUpFetch) error {
	t := time.NewTimer(time.Until(f.began.Add(c.wait)))
	defer t.Stop()
	select {
	case <-f.done:
		return notFetched(f.err)
	case <-t.C:
	}
	select {
	case <-f.done:
		return notFetched(f.err)
	default:
		return fmt.Errorf("%w: the fetch made for it, begun at %s, has not ended after %s (the remote is slow or does not answer; it goes on, for %s at most)",
			ErrNotFetched, f.began.UTC().Format(time.RFC3339), c.wait, c.timeout)
	}
}

// notFetched is err, a failed fetch's, wrapping ErrNotFetched (nil for
// nil).
func notFetched(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: the fetch failed: %w", ErrNotFetched, maskNotFound(err))
}

// maskNotFound keeps a fetch's error from reading as ErrCommitNotFound:
// whatever it wraps, the commit asked for was not looked for.
func maskNotFound(err error) error {
	if errors.Is(err, ErrCommitNotFound) {
		return errors.New(err.Error())
	}
	return err
}
