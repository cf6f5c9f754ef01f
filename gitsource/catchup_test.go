package gitsource_test

import (
	"context"
	"errors"
	"io/fs"
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
