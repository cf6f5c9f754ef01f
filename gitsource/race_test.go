package gitsource_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// TestConcurrentLockersNeverReuseASequence races lockers, each with its own
// clone, on the same lockfile through the real HTTP server. Every
// CommitLocks either lands or retries on the new head; afterwards the
// branch holds exactly one change per successful call, with sequences
// 1, 2, 3, … and no number used twice.
func TestConcurrentLockersNeverReuseASequence(t *testing.T) {
	const (
		lockers   = 6
		perLocker = 4
	)
	ctx := context.Background()
	srv := gitserver.New(t)
	url, dir := srv.CreateRepo("race.git")
	seed := srv.Commit("race.git", "seed", map[string][]byte{"styrmin.cue": []byte("x: 1\n")})

	repos := make([]*gitsource.Repo, lockers)
	for i := range repos {
		r, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{})
		if err != nil {
			t.Fatal(err)
		}
		repos[i] = r
	}

	var (
		mu        sync.Mutex
		succeeded int
		attempts  int
		errs      []error
		start     = make(chan struct{})
		wg        sync.WaitGroup
	)
	for i, r := range repos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range perLocker {
				res, err := r.CommitLocks(ctx, gitsource.CommitRequest{
					Build:       bumpSequence,
					Author:      gitsource.Signature{Name: fmt.Sprintf("locker-%d", i), Email: "locker@localhost"},
					MaxAttempts: 100,
					Backoff:     gitsource.Backoff{Initial: 5 * time.Millisecond, Max: 100 * time.Millisecond},
				})
				mu.Lock()
				attempts += res.Attempts
				if err != nil {
					errs = append(errs, err)
				} else if res.Committed {
					succeeded++
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		t.Errorf("CommitLocks: %v", err)
	}
	t.Logf("%d commits landed in %d attempts", succeeded, attempts)
	if succeeded != lockers*perLocker {
		t.Fatalf("%d commits landed, want %d", succeeded, lockers*perLocker)
	}
	srv.Git(dir, "fsck", "--strict", "--no-progress")

	// Walk the branch in a fresh clone.
	check, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head, _ := check.Head()
	from, _ := gitsource.ParseHash(seed)
	changes, err := check.LockChanges(from, head, "locks")
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != succeeded {
		t.Fatalf("%d lock changes on the branch, want %d (one per successful CommitLocks)", len(changes), succeeded)
	}
	seen := map[int]bool{}
	prev := 0
	for _, c := range changes {
		fsys, err := check.FS(c.Commit)
		if err != nil {
			t.Fatal(err)
		}
		n, err := readSequence(fsys, c.Path)
		if err != nil {
			t.Fatal(err)
		}
		if seen[n] {
			t.Fatalf("sequence %d used twice (commit %s)", n, c.Commit)
		}
		seen[n] = true
		if n != prev+1 {
			t.Fatalf("commit %s has sequence %d after %d; want strictly +1", c.Commit, n, prev)
		}
		if want := map[string]int{"c/e/app": n}; !maps.Equal(c.Locks, want) {
			t.Fatalf("commit %s trailers %v, want %v", c.Commit, c.Locks, want)
		}
		prev = n
	}
}

// TestRepoIsSafeForConcurrentUse reads through FS and LockChanges while
// another goroutine fetches; run with -race.
func TestRepoIsSafeForConcurrentUse(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t)
	url, _ := srv.CreateRepo("cfg.git")
	srv.Commit("cfg.git", "seed", map[string][]byte{appLock: []byte("sequence: 1\n")})
	r, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head, _ := r.Head()
	fsys, err := r.FS(head)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				if i == 0 {
					srv.Commit("cfg.git", "more", map[string][]byte{"x": fmt.Appendf(nil, "%d", j)})
					if _, err := r.Fetch(ctx); err != nil {
						t.Error(err)
					}
					continue
				}
				if n, err := readSequence(fsys, appLock); err != nil || n != 1 {
					t.Errorf("read = %d, %v", n, err)
				}
				h, _ := r.Head()
				if _, err := r.LockChanges(gitsource.Hash{}, h, "locks"); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}
