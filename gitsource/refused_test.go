package gitsource_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// TestAPushRefusedWhileAnotherPushHoldsTheBranchIsTriedAgain pins a lock
// racing another locker's push on a real HTTP git server: git refuses a
// branch whose lock another push holds ("failed to update ref"), and the
// branch is still at the head the lock was built on. The lock is built
// again on the head the other push left and lands after it, numbered
// after it; it failed at once, though only one more attempt was needed.
func TestAPushRefusedWhileAnotherPushHoldsTheBranchIsTriedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := gitserver.New(t)
	url, dir := srv.CreateRepo("race.git")
	srv.Commit("race.git", "seed", map[string][]byte{"styrmin.cue": []byte("x: 1\n")})
	r, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The other locker's push holds the branch's lock, as git-receive-pack
	// does while it moves the branch.
	lock := filepath.Join(dir, "refs", "heads", "main.lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := srv.Requests()
	landed := make(chan struct{})
	go func() {
		defer close(landed)
		// This lock's fetch, then its push (advertisement and pack).
		for srv.Requests() < before+3 {
			time.Sleep(10 * time.Millisecond)
		}
		// The push answered: git refuses the ref in well under a
		// second, and the back-off below is at least 6 s, so a loaded
		// machine has room either side.
		time.Sleep(3 * time.Second)
		_ = os.Remove(lock)
		srv.Commit("race.git", "the other lock", map[string][]byte{appLock: []byte("sequence: 1\n")})
	}()
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence, Backoff: gitsource.Backoff{Initial: 12 * time.Second, Max: 12 * time.Second}})
	<-landed
	if err != nil {
		t.Fatalf("CommitLocks: %v (after %d attempt(s)); want it built again after the other push", err, res.Attempts)
	}
	if !res.Committed || res.Attempts != 2 {
		t.Fatalf("committed %v in %d attempts, want a commit at the second", res.Committed, res.Attempts)
	}
	check, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head, _ := check.Head()
	fsys, err := check.FS(head)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := readSequence(fsys, appLock); err != nil || n != 2 {
		t.Fatalf("sequence at the head %d (%v), want 2: after the other lock's 1", n, err)
	}
}

// TestAPushRefusedForGoodIsAnErrorAfterOneMoreAttempt: a refusal that
// stands (a pre-receive hook declines every push) is returned, naming
// what the remote said, after the one attempt more a refusal at the head
// gets; it is not tried until MaxAttempts.
func TestAPushRefusedForGoodIsAnErrorAfterOneMoreAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := gitserver.New(t)
	url, dir := srv.CreateRepo("hooked.git")
	srv.Commit("hooked.git", "seed", map[string][]byte{"styrmin.cue": []byte("x: 1\n")})
	hook := filepath.Join(dir, "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'protected branch' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence, MaxAttempts: 6,
		Backoff: gitsource.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	if err == nil || res.Committed {
		t.Fatalf("CommitLocks on a branch whose hook declines: committed %v, err %v; want an error", res.Committed, err)
	}
	if res.Attempts != 2 {
		t.Errorf("%d attempts, want 2 (one more for a refusal at the head): %v", res.Attempts, err)
	}
	if !strings.Contains(err.Error(), "push to") || !strings.Contains(err.Error(), "declined") {
		t.Errorf("error %q does not say the push was declined", err)
	}
}
