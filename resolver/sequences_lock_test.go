package resolver

import (
	"testing"

	"github.com/styrmin/styrmin/gitsource"
)

// TestTwoPullRequestsLockingOneSequenceAreLockedAgainAfterTheMerge: pull
// requests A (web at 3 replicas) and B (the same and a message of its
// own), both branched from main, lock web at 2 each, with different
// instances. A merges first (the agent runs A's instance at 2), then B,
// its conflicts resolved to its side. B's lockfile at 2 is no instance
// the agent can run ("sequence 2 does not follow 2"), so the lock after
// the merge locks it again, at 3, the lock's check says so first, and
// then nothing more.
func TestTwoPullRequestsLockingOneSequenceAreLockedAgainAfterTheMerge(t *testing.T) {
	r := newReuseRepo(t)
	web := ID{Cluster: "local", Environment: "dev", Name: "web"}
	base := r.head("main")
	webAt := func(changes []LockChange) *Instance {
		for _, c := range changes {
			if c.ID == web {
				return c.Next
			}
		}
		return nil
	}
	pr := func(branch, body string) *Instance {
		r.setBranch(branch, base)
		commitFiles(t, r.open(branch), "web: "+branch, map[string][]byte{reuseWebFile: []byte(body)})
		in := webAt(r.lock(branch))
		if in == nil || in.Sequence != 2 {
			t.Fatalf("%s locked web at %v; want 2", branch, in)
		}
		return in
	}
	a := pr("pr-a", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	b := pr("pr-b", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 3, message: \"from B\"}\n")
	if a.Digest == b.Digest {
		t.Fatal("the two pull requests lock the same instance")
	}
	r.merge("pr-a")
	r.merge("pr-b")

	// The check (lock --check, and what lock resolves on the working tree).
	check := func() []LockChange {
		t.Helper()
		repo := r.open("main")
		head := gitsource.Hash(r.head("main"))
		seqs, err := repo.LockedSequences(head, ".", lockDir)
		if err != nil {
			t.Fatal(err)
		}
		reused, err := repo.ReusedSequences(head, ".", lockDir)
		if err != nil {
			t.Fatal(err)
		}
		fsys, err := repo.TreeAt(head, ".")
		if err != nil {
			t.Fatal(err)
		}
		ws, err := LoadWorkspace(fsys, WorkspaceOptions{Used: UsedFromTrailers(seqs), Reused: ReusedFromHistory(reused)})
		if err != nil {
			t.Fatal(err)
		}
		lo, err := ws.LockFor(LockRequest{Policy: LockAllOrNothing})
		if err != nil {
			t.Fatal(err)
		}
		return lo.All()
	}
	if in := webAt(check()); in == nil || in.Sequence != 3 || in.Digest != b.Digest {
		t.Errorf("the check after the merge locks web at %s; want B's instance (%s) at 3", lockedAt(in), b.Digest)
	}
	changes := r.lock("main")
	if in := webAt(changes); in == nil || in.Sequence != 3 || in.Digest != b.Digest || len(changes) != 1 {
		t.Fatalf("the lock after the merge locked %d deployments, web at %s; want only web, B's instance (%s) at 3", len(changes), lockedAt(in), b.Digest)
	}
	if changes := check(); len(changes) != 0 {
		t.Errorf("the check after the new lock still locks %s at %d", changes[0].ID, changes[0].Next.Sequence)
	}
}
