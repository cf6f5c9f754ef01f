package ui

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// Follow keeps the repository the pages read up to date in a process that
// does not fetch it itself: an agent replica that is not elected (only
// the elected one's syncer fetches the clone every replica made at start,
// and every replica serves the pages). Before a page is read, when the
// StyrminSource says a head was fetched that the repository's is not, the
// repository is fetched: at most once every Every, one fetch shared by
// the requests that arrive while it runs.
type Follow struct {
	// Reader reads Source (the agent's cache).
	Reader client.Reader
	// Source is the StyrminSource whose status.lastFetchedCommit is the
	// head the fetching process saw last.
	Source types.NamespacedName
	// Fetch brings the repository's head up to date
	// (gitsource.Repo.Fetch); it reports its own errors: a page is read
	// at the head the repository has.
	Fetch func(ctx context.Context) error
	// Standby tells whether the process does not fetch the repository
	// now (nil: never does); while it does, nothing is fetched here.
	Standby func() bool
	// Every is the least time between two fetches (0: 10 s).
	Every time.Duration
}

// follower runs Follow for a handler.
type follower struct {
	Follow
	repo    Repository
	now     func() time.Time
	timeout time.Duration

	mu sync.Mutex
	// last is when the last fetch started; running is closed when the
	// fetch under way ends (nil: none).
	last    time.Time
	running chan struct{}
}

func newFollower(f *Follow, repo Repository, now func() time.Time, timeout time.Duration) *follower {
	if f == nil || repo == nil || f.Reader == nil || f.Fetch == nil {
		return nil
	}
	fl := &follower{Follow: *f, repo: repo, now: now, timeout: timeout}
	if fl.Every <= 0 {
		fl.Every = 10 * time.Second
	}
	return fl
}

// catchUp fetches the repository when the StyrminSource names a fetched
// head it is not at, and waits (until ctx ends) for the fetch under way.
func (fl *follower) catchUp(ctx context.Context) {
	if fl == nil || (fl.Standby != nil && !fl.Standby()) {
		return
	}
	var src v1alpha1.StyrminSource
	if err := fl.Reader.Get(ctx, fl.Source, &src); err != nil || src.Status.LastFetchedCommit == "" {
		return
	}
	if head, err := fl.repo.Head(); err == nil && head.String() == src.Status.LastFetchedCommit {
		return
	}
	fl.mu.Lock()
	done := fl.running
	if done == nil {
		now := fl.now()
		if !fl.last.IsZero() && now.Sub(fl.last) < fl.Every {
			fl.mu.Unlock()
			return
		}
		fl.last = now
		done = make(chan struct{})
		fl.running = done
		// Not bound to this request: the others that wait for it, and
		// the next page, want it done.
		go fl.fetch(done)
	}
	fl.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (fl *follower) fetch(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), fl.timeout)
	defer cancel()
	_ = fl.Fetch(ctx)
	fl.mu.Lock()
	fl.running = nil
	fl.mu.Unlock()
	close(done)
}
