package resolver

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
)

// The example repository's staging environment: two deployments, one
// more than its deletionThreshold of 1 allows a lock to delete.
var stagingDeployments = []string{
	"clusters/local/environments/staging/deployments/web.yaml",
	"clusters/local/environments/staging/deployments/hub.cue",
}

// commitWithTrailer commits files (nil deletes) on main with one
// Styrmin-Allow-Deletions trailer of value allowance ("" for none).
func commitWithTrailer(t *testing.T, r *reuseRepo, subject, allowance string, files map[string][]byte) gitsource.Hash {
	t.Helper()
	ch := gitsource.Change{Files: files, Subject: subject}
	if allowance != "" {
		ch.Trailers = []gitsource.Trailer{{Key: AllowDeletionsTrailer, Value: allowance}}
	}
	res, err := r.open("main").CommitLocks(context.Background(), gitsource.CommitRequest{
		Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) { return ch, nil },
	})
	if err != nil || !res.Committed {
		t.Fatalf("commit %s: %+v, %v", subject, res, err)
	}
	return res.Commit
}

func deleting(paths ...string) map[string][]byte {
	files := map[string][]byte{}
	for _, p := range paths {
		files[p] = nil
	}
	return files
}

func lockMain(r *reuseRepo) (CommitOutcome, error) {
	repo := r.open("main")
	return CommitLocksWith(context.Background(), repo, WorkspaceOptions{}, LockRequest{}, CommitOptions{History: repo})
}

// TestAMalformedAllowanceTrailerIsNamedWhenTheLockNeedsIt pins that a
// Styrmin-Allow-Deletions trailer that is no whole number ≥ 0, on a
// commit deleting more deployments than the threshold, refuses the lock
// with an error naming the commit, the trailer, its value and what was
// expected, and commits nothing. Ignored, it gave only "allow it
// explicitly: --allow-deletions 2", a flag the agent's lock mode has not.
func TestAMalformedAllowanceTrailerIsNamedWhenTheLockNeedsIt(t *testing.T) {
	for _, value := range []string{"two", "-1", "+2", "2.0", "2 deployments", "0x2"} {
		t.Run(value, func(t *testing.T) {
			r := newReuseRepo(t)
			bad := commitWithTrailer(t, r, "remove staging", value, deleting(stagingDeployments...))
			_, err := lockMain(r)
			var te *AllowanceTrailerError
			if !errors.As(err, &te) {
				t.Fatalf("err = %v, want an *AllowanceTrailerError", err)
			}
			for _, want := range []string{"commit " + bad.Short(), AllowDeletionsTrailer, `"` + value + `"`, "expected a whole number ≥ 0", "nothing was written"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			// The agent's lock mode waits for the next head on a refusal:
			// the error still is one.
			var refused *DeletionsRefusedError
			if !errors.As(err, &refused) || refused.Deletions.Count != 2 {
				t.Errorf("err = %v, want it to unwrap to the refusal of 2 deletions", err)
			}
			if head := r.head("main"); gitsource.Hash(head) != bad {
				t.Errorf("main moved to %s, want it left at %s", head, bad)
			}
		})
	}
}

// TestAWellFormedAllowanceTrailerStillAllows is the control: the same
// commit with "2" locks the deletions.
func TestAWellFormedAllowanceTrailerStillAllows(t *testing.T) {
	r := newReuseRepo(t)
	commitWithTrailer(t, r, "remove staging", "2", deleting(stagingDeployments...))
	out, err := lockMain(r)
	if err != nil || !out.Committed {
		t.Fatalf("lock: %+v, %v", out.CommitResult, err)
	}
	if got := Deleted(out.Changes); len(got) != 2 {
		t.Errorf("deleted %v, want staging's two deployments", got)
	}
}

// TestAnAllowanceOnALaterCommitGetsPastAMalformedOne pins the way out the
// refusal names: a pushed commit's message cannot be corrected, so the
// trailer on a new commit allows what the malformed one did not.
func TestAnAllowanceOnALaterCommitGetsPastAMalformedOne(t *testing.T) {
	r := newReuseRepo(t)
	commitWithTrailer(t, r, "remove staging", "two", deleting(stagingDeployments...))
	commitWithTrailer(t, r, "web: 3 replicas", "2", map[string][]byte{
		reuseWebFile: []byte("driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n"),
	})
	if out, err := lockMain(r); err != nil || !out.Committed {
		t.Fatalf("lock: %+v, %v", out.CommitResult, err)
	}
}

// TestAMalformedAllowanceTrailerAllowsNothingAndBlocksNothing pins the
// other half: a lock that needs no allowance locks whatever the
// trailer says, as the value could change nothing. Refusing it would stop
// every later lock on the branch (the agent's lock mode included), since
// no commit can correct a pushed one's message.
func TestAMalformedAllowanceTrailerAllowsNothingAndBlocksNothing(t *testing.T) {
	r := newReuseRepo(t)
	commitWithTrailer(t, r, "remove staging web", "one", deleting(stagingDeployments[0]))
	out, err := lockMain(r)
	if err != nil || !out.Committed {
		t.Fatalf("lock: %+v, %v", out.CommitResult, err)
	}
	if got := Deleted(out.Changes); len(got) != 1 {
		t.Errorf("deleted %v, want staging/web", got)
	}
}

// TestTheDeletionRefusalNamesTheTrailer: the refusal names both ways to
// allow the deletions, the flag and the trailer, since a committed lock
// in the agent's lock mode takes no flag.
func TestTheDeletionRefusalNamesTheTrailer(t *testing.T) {
	err := &DeletionsRefusedError{Deletions: Deletions{Count: 2, Threshold: 1, Refused: true}, IDs: []ID{{"local", "staging", "hub"}, {"local", "staging", "web"}}}
	for _, want := range []string{"--allow-deletions 2", `"Styrmin-Allow-Deletions: 2"`, "lock mode"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q:\n%v", want, err)
		}
	}
}
