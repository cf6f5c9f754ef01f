package operator_test

import (
	"context"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/operator/source"
)

// The lock mode locks a configuration head and pushes the lock commit; the
// lock commit itself, and a configuration commit whose locks are current,
// make no further commit (no loop).
func TestLockerLocksConfigurationHeadsOnceAndNeverItsOwnCommits(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t, gitserver.WithToken(agentGitToken))
	srv.Seed(agentRepoName, exampleRepo(t), "examples")
	var pushed []source.LockResult
	repo, err := gitsource.Clone(ctx, srv.RepoURL(agentRepoName), "", gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: agentGitToken}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := source.NewLocker(source.LockModeOptions{
		Repo:     repo,
		OnLocked: func(r source.LockResult) { pushed = append(pushed, r) },
	})
	if err != nil {
		t.Fatal(err)
	}

	res, err := l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit.IsZero() || len(res.Locked) != 2 {
		t.Fatalf("first lock: commit %v, locked %v; want a commit locking web and hub", res.Commit, res.Locked)
	}
	if got := srv.Head(agentRepoName, "main"); got != res.Commit.String() {
		t.Fatalf("remote head %s, want the lock commit %s", got, res.Commit)
	}

	// The next round sees its own lock commit: nothing to do.
	res, err = l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Skipped || !res.Commit.IsZero() {
		t.Fatalf("round on the lock commit: %+v; want skipped", res)
	}

	// A lock commit by someone else (CI) is skipped too, without resolving.
	other, err := gitsource.Clone(ctx, srv.RepoURL(agentRepoName), "", gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: agentGitToken}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Commit(agentRepoName, "more workers", hubConfig("1.4.0", 3, "debug"))
	if locked := lockRepo(t, other); locked["hub"] != 2 {
		t.Fatalf("CI lock: %v, want hub=2", locked)
	}
	res, err = l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Skipped {
		t.Fatalf("round on CI's lock commit: %+v; want skipped", res)
	}

	// A configuration commit that changes no instance makes no lock commit.
	before := srv.Head(agentRepoName, "main")
	srv.Commit(agentRepoName, "same config again", nil)
	res, err = l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped || !res.Commit.IsZero() || len(res.Locked) != 0 {
		t.Fatalf("round on an unchanged configuration: %+v; want resolved, no commit", res)
	}
	if got := srv.Head(agentRepoName, "main"); got == before {
		t.Fatal("the empty configuration commit did not land")
	}

	// A real change is locked, once.
	srv.Commit(agentRepoName, "log less", hubConfig("1.4.0", 3, "warning"))
	res, err = l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Locked) != 1 || res.Locked[0] != "local/dev/hub=3" {
		t.Fatalf("locked %v, want [local/dev/hub=3]", res.Locked)
	}
	if len(pushed) != 2 {
		t.Fatalf("OnLocked called %d times, want 2 (one per lock commit pushed)", len(pushed))
	}
}
