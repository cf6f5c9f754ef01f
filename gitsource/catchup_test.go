package gitsource_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// TestACommitTheCloneHasNotSeenIsFetchedOnceForEveryReader: an agent
// elected after another reads lockfiles at commits its clone (made when
// it started, maybe days before) has never seen. They read as gone for
// good, and the changes failed. CatchUp fetches on such a miss: readers
// that miss together share one fetch, a commit the remote does not hold
// either stays not found, and misses within the interval fetch nothing.
func TestACommitTheCloneHasNotSeenIsFetchedOnceForEveryReader(t *testing.T) {
	srv := gitserver.New(t)
	srv.Commit("desired", "first", map[string][]byte{"a.txt": []byte("1")})
	repo, err := gitsource.Clone(context.Background(), srv.RepoURL("desired"), "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	second := srv.Commit("desired", "second", map[string][]byte{"a.txt": []byte("2")})
	h, err := gitsource.ParseHash(second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.FS(h); !errors.Is(err, gitsource.ErrCommitNotFound) {
		t.Fatalf("the clone reads a commit pushed after it was made: %v", err)
	}
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	c := gitsource.NewCatchUp(repo, gitsource.CatchUpOptions{Every: time.Minute, Now: clock})

	before := srv.Requests()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			fsys, err := c.FS(h)
			if err == nil {
				var data []byte
				data, err = fs.ReadFile(fsys, "a.txt")
				if err == nil && string(data) != "2" {
					err = errors.New("a.txt holds " + string(data))
				}
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
	}
	// One fetch: its ref advertisement and its pack (a fetch asks for the
	// advertisement again before the objects).
	if n := srv.Requests() - before; n == 0 || n > 4 {
		t.Fatalf("eight readers that missed made %d requests, want one fetch", n)
	}

	gone := gitsource.Hash{0xde, 0xad}
	before = srv.Requests()
	if _, err := c.FS(gone); !errors.Is(err, gitsource.ErrCommitNotFound) {
		t.Fatalf("a commit the remote does not hold: %v, want ErrCommitNotFound", err)
	}
	if _, err := c.FS(gone); !errors.Is(err, gitsource.ErrCommitNotFound) {
		t.Fatal(err)
	}
	if n := srv.Requests() - before; n != 0 {
		t.Fatalf("misses within the interval after a fetch made %d requests, want none", n)
	}
	now = now.Add(2 * time.Minute)
	if _, err := c.FS(gone); !errors.Is(err, gitsource.ErrCommitNotFound) {
		t.Fatal(err)
	}
	if n := srv.Requests() - before; n == 0 {
		t.Fatal("a miss after the interval fetched nothing")
	}
}

// TestACommitIsNotTakenAsGoneWhenItsFetchFails: a fetch that failed (a
// remote blip during a leader handover) was taken as the remote's answer:
// the reader got ErrCommitNotFound, its task failed for good though
// nothing was wrong in git, and every reader that missed within the
// interval after it got the same without a fetch. A failed fetch is
// ErrNotFetched, which is retried, and once the remote answers the
// commit is found.
func TestACommitIsNotTakenAsGoneWhenItsFetchFails(t *testing.T) {
	srv, repo, _, h := cloneOneBehind(t, "")
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	c := gitsource.NewCatchUp(repo, gitsource.CatchUpOptions{Every: time.Minute, Now: clock})

	srv.Stop()
	_, err := c.FS(h)
	if errors.Is(err, gitsource.ErrCommitNotFound) || !errors.Is(err, gitsource.ErrNotFetched) {
		t.Fatalf("a miss whose fetch failed: %v, want ErrNotFetched, not ErrCommitNotFound", err)
	}
	if srv.Refused() == 0 {
		t.Fatal("the miss made no fetch")
	}
	// Within the interval the remote is not asked again, and its failure
	// is still no answer.
	refused := srv.Refused()
	now = now.Add(10 * time.Second)
	_, err = c.FS(h)
	if errors.Is(err, gitsource.ErrCommitNotFound) || !errors.Is(err, gitsource.ErrNotFetched) {
		t.Fatalf("a miss within the interval after a failed fetch: %v, want ErrNotFetched", err)
	}
	if srv.Refused() != refused {
		t.Fatal("a miss within the interval after a failed fetch fetched again")
	}

	srv.Start()
	now = now.Add(time.Minute)
	fsys, err := c.FS(h)
	if err != nil {
		t.Fatalf("once the remote answers: %v", err)
	}
	if data, err := fs.ReadFile(fsys, "a.txt"); err != nil || string(data) != "2" {
		t.Fatalf("a.txt: %q, %v", data, err)
	}
}

// TestAFailedSyncerFetchIsNoAnswerForAMiss: the syncer's fetches count as
// the last fetch; one that failed after one that succeeded leaves a miss
// within the interval unanswered (ErrNotFetched), not gone.
func TestAFailedSyncerFetchIsNoAnswerForAMiss(t *testing.T) {
	srv := gitserver.New(t)
	srv.Commit("desired", "first", map[string][]byte{"a.txt": []byte("1")})
	repo, err := gitsource.Clone(context.Background(), srv.RepoURL("desired"), "", gitsource.CloneOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	c := gitsource.NewCatchUp(repo, gitsource.CatchUpOptions{Every: time.Minute, Now: func() time.Time { return now }})
	if _, err := c.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, err := gitsource.ParseHash(srv.Commit("desired", "second", map[string][]byte{"a.txt": []byte("2")}))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := c.Fetch(context.Background()); err == nil {
		t.Fatal("a fetch from a stopped server succeeded")
	}
	if _, err := c.FS(h); errors.Is(err, gitsource.ErrCommitNotFound) || !errors.Is(err, gitsource.ErrNotFetched) {
		t.Fatalf("a miss after a failed fetch: %v, want ErrNotFetched", err)
	}
}

// TestAReaderWaitsForAFetchTheRemoteDoesNotAnswerOnlyUntilItsBound: a
// remote that takes the connection and never answers (a git host that
// hangs) held every reader that missed for the whole fetch's timeout (ten
// minutes in the agent), each a worker of the task or StyrminDeployment
// controller: a replica elected with an old clone then ran nothing, for
// any deployment, while the host hung. A reader waits until the fetch has
// run its bound (Wait), then gets ErrNotFetched (retried, never taken as
// gone); one that misses later gets it at once; the fetch goes on, one at
// a time, and once the host answers the commit is read.
func TestAReaderWaitsForAFetchTheRemoteDoesNotAnswerOnlyUntilItsBound(t *testing.T) {
	srv, repo, _, h := cloneOneBehind(t, "")
	const wait, timeout = 500 * time.Millisecond, time.Minute
	c := gitsource.NewCatchUp(repo, gitsource.CatchUpOptions{Every: time.Millisecond, Timeout: timeout, Wait: wait})
	srv.Hang()
	before := srv.Requests()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = c.FS(h) })
	}
	wg.Wait()
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("readers of a remote that does not answer waited %s, want about their bound %s (the fetch's timeout is %s)", took, wait, timeout)
	}
	for i, err := range errs {
		if errors.Is(err, gitsource.ErrCommitNotFound) || !errors.Is(err, gitsource.ErrNotFetched) || !strings.Contains(err.Error(), "has not ended after "+wait.String()) {
			t.Fatalf("reader %d: %v; want ErrNotFetched saying the fetch has not ended", i, err)
		}
	}
	later := time.Now()
	if _, err := c.FS(h); !errors.Is(err, gitsource.ErrNotFetched) || time.Since(later) > wait/2 {
		t.Fatalf("a reader after the bound: %v after %s; want ErrNotFetched at once", err, time.Since(later))
	}
	if n := srv.Requests() - before; n != 1 {
		t.Fatalf("the readers made %d requests of the hung remote, want the one fetch's", n)
	}

	srv.Start()
	readsOnceAnswered(t, c, h)
}

// TestAFetchStalledInItsPackBlocksNoReader: a git host that answers the
// ref list and then stalls while it sends the pack held the fetch under
// the clone's lock for the whole fetch's timeout (--git-timeout, ten
// minutes in the agent): every reader waited with it, of commits the
// clone holds too, and a reader that missed got ErrNotFetched only then,
// not after its bound (Wait). While the pack is held, the clone's
// commits are read and its head stays where it was (the ref moves only
// once the objects are stored); a miss is ErrNotFetched within Wait; once
// the host answers, the fetch brings the commit.
func TestAFetchStalledInItsPackBlocksNoReader(t *testing.T) {
	srv, repo, first, second := cloneOneBehind(t, t.TempDir())
	const wait, timeout = 500 * time.Millisecond, time.Minute
	c := gitsource.NewCatchUp(repo, gitsource.CatchUpOptions{Every: time.Millisecond, Timeout: timeout, Wait: wait})
	srv.HangPack()
	if _, err := c.FS(second); !errors.Is(err, gitsource.ErrNotFetched) {
		t.Fatalf("the first reader that missed: %v, want ErrNotFetched", err)
	}
	for deadline := time.Now().Add(10 * time.Second); srv.Held() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the catch-up fetch never asked for the pack")
		}
	}

	readFirst := func() error {
		if h, err := repo.Head(); err != nil || h != first {
			return fmt.Errorf("head %s, %v; want %s (the ref moved before its objects came)", h, err, first)
		}
		fsys, err := c.FS(first)
		if err != nil {
			return err
		}
		if data, err := fs.ReadFile(fsys, "a.txt"); err != nil || string(data) != "1" {
			return fmt.Errorf("a.txt: %q, %v", data, err)
		}
		return nil
	}
	if err := within(t, 5*time.Second, "a reader of a commit the clone holds, while the pack is held", readFirst); err != nil {
		t.Fatal(err)
	}
	missed := func() error {
		_, err := c.FS(second)
		if errors.Is(err, gitsource.ErrNotFetched) {
			return nil
		}
		return fmt.Errorf("%v, want ErrNotFetched", err)
	}
	if err := within(t, wait+5*time.Second, "a reader that missed, while the pack is held", missed); err != nil {
		t.Fatal(err)
	}

	srv.Start()
	readsOnceAnswered(t, c, second)
	if h, err := repo.Head(); err != nil || h != second {
		t.Fatalf("head after the fetch: %s, %v; want %s", h, err, second)
	}
}

// readsOnceAnswered waits, up to 30 s, until c reads commit h (a.txt
// holding "2"), retrying while it is not fetched yet.
func readsOnceAnswered(t *testing.T, c *gitsource.CatchUp, h gitsource.Hash) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		fsys, err := c.FS(h)
		if err == nil {
			if data, err := fs.ReadFile(fsys, "a.txt"); err != nil || string(data) != "2" {
				t.Fatalf("a.txt: %q, %v", data, err)
			}
			return
		}
		if errors.Is(err, gitsource.ErrCommitNotFound) || time.Now().After(deadline) {
			t.Fatalf("once the remote answers: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cloneOneBehind serves repository desired with commit first (a.txt
// holding "1"), clones its main into dir ("": in memory), then commits
// second (a.txt holding "2"), which the clone has not seen.
func cloneOneBehind(t *testing.T, dir string) (srv *gitserver.Server, repo *gitsource.Repo, first, second gitsource.Hash) {
	t.Helper()
	srv = gitserver.New(t)
	first, err := gitsource.ParseHash(srv.Commit("desired", "first", map[string][]byte{"a.txt": []byte("1")}))
	if err != nil {
		t.Fatal(err)
	}
	if repo, err = gitsource.Clone(context.Background(), srv.RepoURL("desired"), dir, gitsource.CloneOptions{Branch: "main"}); err != nil {
		t.Fatal(err)
	}
	if second, err = gitsource.ParseHash(srv.Commit("desired", "second", map[string][]byte{"a.txt": []byte("2")})); err != nil {
		t.Fatal(err)
	}
	return srv, repo, first, second
}
