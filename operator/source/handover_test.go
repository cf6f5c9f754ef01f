package source_test

import (
	"context"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/source"
)

// pausedFetch is a clone whose next fetch, once paused, waits after it
// fetched until resume is closed: a replica that stops (its lease lost,
// its process frozen) between its fetch and the rest of its sync.
type pausedFetch struct {
	source.SourceRepo
	pause   bool
	fetched chan gitsource.Hash
	resume  chan struct{}
}

func (p *pausedFetch) Fetch(ctx context.Context) (gitsource.FetchResult, error) {
	fr, err := p.SourceRepo.Fetch(ctx)
	if p.pause {
		p.pause = false
		p.fetched <- fr.Head
		<-p.resume
	}
	return fr, err
}

// TestAReplicaThatLostItsLeaseDoesNotMoveTheSyncPositionBack pins the
// sync position against a second writer: the old leader fetched head 1
// and stopped; the next leader synced head 2; the old one, going on,
// finds the StyrminSource written since (a conflict) and reads it again.
// Head 2 stays the recorded position, and the old one's next sync walks
// on from there; it wrote head 1 over it, and every commit of the walk
// since would be walked, and its statuses decided, again.
func TestAReplicaThatLostItsLeaseDoesNotMoveTheSyncPositionBack(t *testing.T) {
	t.Parallel()
	e := startSyncEnv(t)
	old := &pausedFetch{SourceRepo: e.repo, fetched: make(chan gitsource.Hash, 1), resume: make(chan struct{})}
	a := e.syncerOf(old)
	if _, err := a.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}

	h1 := e.lock("web 1", instanceAt("web", "dev-web", 1))
	old.pause = true
	done := make(chan error, 1)
	go func() {
		_, err := a.Sync(e.ctx)
		done <- err
	}()
	if got := <-old.fetched; got.String() != h1 {
		t.Fatalf("the old leader fetched %s, want %s", got, h1)
	}

	h2 := e.lock("web 2", instanceAt("web", "dev-web", 2))
	b := e.syncer()
	res, err := b.Sync(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Head.String() != h2 || len(res.Created) != 2 {
		t.Fatalf("the new leader synced %s creating %v, want %s and both tasks of web", res.Head, res.Created, h2)
	}

	close(old.resume)
	if err := <-done; err != nil {
		t.Fatalf("the old leader's sync: %v", err)
	}
	if got := e.source().Status.LastSyncedCommit; got != h2 {
		t.Fatalf("recorded position %s, want %s (the new leader's): the old leader moved it back to %s", got, h2, h1)
	}
	if res, err := a.Sync(e.ctx); err != nil || res.Head.String() != h2 || len(res.Created) != 0 {
		t.Fatalf("the old leader's next sync: head %s, created %v, %v; want %s and no task", res.Head, res.Created, err, h2)
	}
	if got := e.source().Status.LastSyncedCommit; got != h2 {
		t.Fatalf("recorded position %s after the old leader's next sync, want %s", got, h2)
	}
}
