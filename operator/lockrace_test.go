package operator_test

import (
	"context"
	"testing"

	"github.com/styrmin/styrmin/operator/source"
	"github.com/styrmin/styrmin/resolver"
)

// TestALockByHandAtTheNumberTheClusterRanAfterARewindIsLockedAgain pins
// a person's `styrminctl lock --push` racing the lock mode after a
// rewind: the branch is force-pushed back to hub's lock 2 while the
// cluster ran 3, and a person's lock, numbering after the branch's
// history only, locks hub's next configuration at 3, a number the
// cluster ran for other content (the agent refuses it: SequenceUsed).
// The lock mode locks that content again past the cluster's 3, as it
// does a lockfile below it; it skipped the person's lock commit, and hub
// stayed on a configuration the cluster never runs until the next change.
func TestALockByHandAtTheNumberTheClusterRanAfterARewindIsLockedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := exampleServer(t)
	ran, used, onLocked := clusterRuns()
	digests := map[resolver.ID]string{}
	repo := cloneOf(t, srv)
	l, err := source.NewLocker(source.LockModeOptions{Repo: repo, Used: used, OnLocked: func(r source.LockResult) {
		onLocked(r)
		hub := headLock(t, cloneOf(t, srv), "locks/local/dev/hub.lock.yaml")
		digests[hub.ID] = hub.Digest
	}, RanDigests: func(context.Context) (map[resolver.ID]string, error) { return digests, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.LockHead(ctx); err != nil {
		t.Fatal(err)
	}
	var second string
	for _, workers := range []int{3, 4} {
		srv.Commit(agentRepoName, "more workers", hubConfig("1.4.0", workers, "debug"))
		if _, err := l.LockHead(ctx); err != nil {
			t.Fatal(err)
		}
		if second == "" {
			second = srv.Head(agentRepoName, "main")
		}
	}
	hub := resolver.ID{Cluster: "local", Environment: "dev", Name: "hub"}
	if ran[hub] != 3 {
		t.Fatalf("hub ran up to %d, want 3", ran[hub])
	}

	// Rewound to hub's lock 2; a person locks five workers by hand.
	srv.Reset(agentRepoName, "main", second)
	srv.Commit(agentRepoName, "five workers", hubConfig("1.4.0", 5, "debug"))
	person := cloneOf(t, srv)
	out, err := resolver.CommitLocksWith(ctx, person, resolver.WorkspaceOptions{}, resolver.LockRequest{Policy: resolver.LockKeepGoing}, resolver.CommitOptions{History: person})
	if err != nil || !out.Committed {
		t.Fatalf("the person's lock: %+v, %v", out, err)
	}
	byHand := headLock(t, cloneOf(t, srv), "locks/local/dev/hub.lock.yaml")
	if byHand.Sequence != 3 || byHand.Digest == digests[hub] {
		t.Fatalf("the person's lock numbered hub %d (digest %s), want 3 (after the branch's 2) for five workers", byHand.Sequence, byHand.Digest)
	}

	res, err := l.LockHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped || len(res.Locked) != 1 || res.Locked[0] != "local/dev/hub=4" {
		t.Fatalf("the lock mode on the person's lock: %+v; want hub locked again at 4, past the 3 the cluster ran", res)
	}
	if in := headLock(t, cloneOf(t, srv), "locks/local/dev/hub.lock.yaml"); in.Sequence != 4 || in.Digest != byHand.Digest {
		t.Errorf("hub's lock is %d (digest %s), want 4 locking the person's five workers (%s)", in.Sequence, in.Digest, byHand.Digest)
	}
}
