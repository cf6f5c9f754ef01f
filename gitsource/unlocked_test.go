package gitsource_test

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
)

func hashOf(t *testing.T, s string) gitsource.Hash {
	t.Helper()
	h, err := gitsource.ParseHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func shortList(hs []gitsource.Hash, names map[string]string) string {
	var out []string
	for _, h := range hs {
		out = append(out, names[h.String()])
	}
	return strings.Join(out, ",")
}

// TestUnlockedChangesListsTheConfigurationCommitsSinceTheLastLock pins
// what a lock walks: first-parent commits after the newest one that
// changed the locks, only those that change the folder outside its locks;
// a merged branch counts once.
func TestUnlockedChangesListsTheConfigurationCommitsSinceTheLastLock(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("config", map[string]string{"deploy/clusters/a.cue": "a: 1\n", "README.md": "x\n"})
	open := func() *gitsource.Repo {
		r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	head := func() gitsource.Hash { return hashOf(t, lr.git("rev-parse", "HEAD")) }

	// Never locked: no base.
	un, err := open().UnlockedChanges(head(), "deploy", "locks", 0)
	if err != nil || !un.Base.IsZero() || len(un.Commits) != 1 {
		t.Fatalf("never locked: %+v, %v", un, err)
	}

	lock := lr.commit("lock", map[string]string{"deploy/locks/a.lock.yaml": "1\n"})
	lr.commit("readme outside the folder", map[string]string{"README.md": "y\n"})
	c1 := lr.commit("change one", map[string]string{"deploy/clusters/a.cue": "a: 2\n"})
	lr.git("checkout", "-q", "-b", "feature")
	lr.commit("feature one", map[string]string{"deploy/clusters/b.cue": "b: 1\n"})
	lr.commit("feature two", map[string]string{"deploy/clusters/b.cue": "b: 2\n"})
	lr.git("checkout", "-q", "main")
	lr.commit("change two", map[string]string{"deploy/clusters/c.cue": "c: 1\n"})
	lr.git("merge", "-q", "--no-ff", "-m", "merge feature", "feature")
	merge := lr.git("rev-parse", "HEAD")
	names := lr.subjects()

	un, err = open().UnlockedChanges(head(), "deploy", "locks", 0)
	if err != nil {
		t.Fatal(err)
	}
	if un.Base.String() != lock {
		t.Errorf("base %s, want the lock commit %s", names[un.Base.String()], lock)
	}
	if got, want := shortList(un.Commits, names), "change one,change two,merge feature"; got != want {
		t.Errorf("commits %s, want %s", got, want)
	}
	if un.Commits[0].String() != c1 || un.Commits[2].String() != merge {
		t.Errorf("commits out of order: %v", un.Commits)
	}
	// The whole repository as the folder: the README edit counts too.
	lr.commit("lock at the root", map[string]string{"locks/x.lock.yaml": "1\n"})
	lr.commit("root readme", map[string]string{"README.md": "z\n"})
	un, err = open().UnlockedChanges(head(), ".", "locks", 0)
	if err != nil || len(un.Commits) != 1 || lr.subjects()[un.Commits[0].String()] != "root readme" {
		t.Errorf("root folder: %+v, %v", un, err)
	}
	// A bounded walk that does not reach the base says so.
	for i := 0; i < 3; i++ {
		lr.commit("more", map[string]string{"c.cue": strings.Repeat("c", i+1)})
	}
	if _, err := open().UnlockedChanges(head(), ".", "locks", 2); !errors.Is(err, gitsource.ErrTooManyUnlocked) {
		t.Errorf("limit 2 over 4 commits: %v, want ErrTooManyUnlocked", err)
	}
}

// TestLockedSequencesAreTheHighestEverNamed: the numbers survive the
// lockfiles, are read from every reachable commit, and a second call
// after new commits sees them.
func TestLockedSequencesAreTheHighestEverNamed(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("styrmin: lock\n\nStyrmin-Lock: c/e/a=3\nStyrmin-Lock: c/e/b=1", map[string]string{"locks/a": "3\n"})
	lr.commit("styrmin: lock\n\nStyrmin-Lock: c/e/a=5", map[string]string{"locks/a": "5\n"})
	lr.commit("delete by hand", map[string]string{"locks/a": del})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.LockedSequences(hashOf(t, lr.git("rev-parse", "HEAD")), ".", "locks")
	if err != nil || got["c/e/a"] != 5 || got["c/e/b"] != 1 || len(got) != 2 {
		t.Fatalf("got %v, %v", got, err)
	}
	got["c/e/a"] = 99 // the caller's copy
	lr.git("checkout", "-q", "-b", "side", "HEAD~2")
	lr.commit("styrmin: lock\n\nStyrmin-Lock: c/e/b=7", map[string]string{"locks/b": "7\n"})
	lr.git("checkout", "-q", "main")
	lr.git("merge", "-q", "--no-ff", "-m", "merge side", "side")
	got, err = r.LockedSequences(hashOf(t, lr.git("rev-parse", "HEAD")), ".", "locks")
	if err != nil || got["c/e/a"] != 5 || got["c/e/b"] != 7 {
		t.Fatalf("after a merge: %v, %v", got, err)
	}
}

// TestLockedSequencesSkipAMalformedTrailer: a bad trailer is skipped, not
// an error that would stop every later lock of the branch; a key given
// twice counts with its highest number.
func TestLockedSequencesSkipAMalformedTrailer(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("styrmin: lock\n\nStyrmin-Lock: c/e/a=2", map[string]string{"locks/a": "2\n"})
	lr.commit("hand-made lock\n\nStyrmin-Lock: c/e/a=03\nStyrmin-Lock: c/e/b=4\nStyrmin-Lock: c/e/b=6", map[string]string{"locks/a": "3\n"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.LockedSequences(hashOf(t, lr.git("rev-parse", "HEAD")), ".", "locks")
	if err != nil || !maps.Equal(got, map[string]int{"c/e/a": 2, "c/e/b": 6}) {
		t.Fatalf("got %v, %v; want c/e/a=2 (the bad 03 skipped) and c/e/b=6", got, err)
	}
}

// TestLockedSequencesIgnoreANumberOutOfRange: a number no lock could have
// written (0, above 2^53-1, or that highest itself, which would leave no
// next one) in a message's body, its trailers or a lockfile committed by hand
// is ignored. Taken as the deployment's highest it was dropped by the
// resolver, which then forgot the real highest (12) and could lock 12
// again.
func TestLockedSequencesIgnoreANumberOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name    string
		message string
		files   map[string]string
	}{
		{"a line in the body", "notes\n\nStyrmin-Lock: c/e/d=9007199254740993\n\nSigned-off-by: x", nil},
		{"a trailer", "notes\n\nStyrmin-Lock: c/e/d=9007199254740993", nil},
		{"a trailer at the highest sequence", "notes\n\nStyrmin-Lock: c/e/d=9007199254740991", nil},
		{"a trailer at zero", "notes\n\nStyrmin-Lock: c/e/d=0\nStyrmin-Lock: c/e/z=0", nil},
		{"a lockfile committed by hand", "locked by hand", map[string]string{"locks/c/e/d.lock.yaml": "kind: Instance\nsequence: 9007199254740993\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := newLocalRepo(t, false)
			lr.commit("styrmin: lock c/e/d=11\n\nStyrmin-Lock: c/e/d=11", map[string]string{"locks/c/e/d.lock.yaml": "kind: Instance\nsequence: 11\n"})
			lr.commit("styrmin: lock c/e/d=12\n\nStyrmin-Lock: c/e/d=12", map[string]string{"locks/c/e/d.lock.yaml": "kind: Instance\nsequence: 12\n"})
			lr.commit(tc.message, tc.files)
			r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.LockedSequences(hashOf(t, lr.git("rev-parse", "HEAD")), ".", "locks")
			if want := map[string]int{"c/e/d": 12}; err != nil || !maps.Equal(got, want) {
				t.Fatalf("got %v, %v; want %v: the number out of range ignored", got, err, want)
			}
		})
	}
}

// TestCommitLocksChainLandsWholeInAFolder: a chain is one commit per
// change that changes the tree, written below Dir, and the branch moves
// once.
func TestCommitLocksChainLandsWholeInAFolder(t *testing.T) {
	lr := newLocalRepo(t, false)
	base := lr.commit("config", map[string]string{"deploy/styrmin.cue": "x: 1\n"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	res, err := r.CommitLocks(context.Background(), gitsource.CommitRequest{
		Dir: "deploy",
		Chain: func(_ context.Context, _ gitsource.Hash, headFS fs.FS) ([]gitsource.Change, error) {
			b, err := fs.ReadFile(headFS, "styrmin.cue")
			seen = append(seen, string(b))
			return []gitsource.Change{
				{Files: map[string][]byte{"locks/a.lock.yaml": []byte("1\n")}, Locks: map[string]int{"c/e/a": 1}},
				{Files: map[string][]byte{"locks/a.lock.yaml": []byte("1\n")}, Locks: map[string]int{"c/e/a": 1}}, // no change: no commit
				{Files: map[string][]byte{"locks/a.lock.yaml": []byte("2\n")}, Locks: map[string]int{"c/e/a": 2}},
			}, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != "x: 1\n" {
		t.Errorf("the chain saw %q, want the folder's styrmin.cue", seen)
	}
	if len(res.Commits) != 2 || res.Commit != res.Commits[1] || res.Parent.String() != base {
		t.Fatalf("result %+v", res)
	}
	if got := lr.git("log", "--format=%s", "main"); got != "styrmin: lock c/e/a=2\nstyrmin: lock c/e/a=1\nconfig" {
		t.Errorf("history:\n%s", got)
	}
	if got := lr.git("show", "HEAD~1:deploy/locks/a.lock.yaml"); got != "1" {
		t.Errorf("first lock commit holds %q", got)
	}
	if got := lr.git("status", "--porcelain"); got != "" {
		t.Errorf("worktree not updated:\n%s", got)
	}
}

// TestARetryCommitIsNotTheLastLock pins which commits that change the
// locks end the walk: one that only locks the same instances again (each
// changed lockfile differs in its sequence and checksum alone: a retry)
// does not, so the configuration commits before it are still unlocked;
// one that changes anything else of a lockfile (an upgrade request
// recorded, a tombstone), adds or removes one, does.
func TestARetryCommitIsNotTheLastLock(t *testing.T) {
	lockfile := func(seq, sum, upgrade string) string {
		return "# written by styrminctl lock\napiVersion: styrmin.io/v1alpha1\nchecksum: sha256:" + sum +
			"\ndigest: sha256:d1\ndriver:\n  name: graphhub\n  sequence: 7\n" + upgrade + "kind: Instance\nsequence: " + seq + "\n"
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		base  bool // the commit is the last lock
	}{
		{"a retry", map[string]string{"locks/c/e/a.lock.yaml": lockfile("2", "b", "")}, false},
		{"an upgrade request recorded", map[string]string{"locks/c/e/a.lock.yaml": lockfile("2", "b", "  upgradeRequest: r1\n")}, true},
		{"a nested sequence changed", map[string]string{"locks/c/e/a.lock.yaml": strings.Replace(lockfile("2", "b", ""), "  sequence: 7", "  sequence: 8", 1)}, true},
		{"a lockfile added", map[string]string{"locks/c/e/a.lock.yaml": lockfile("2", "b", ""), "locks/c/e/b.lock.yaml": lockfile("1", "c", "")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := newLocalRepo(t, false)
			lock := lr.commit("lock", map[string]string{"clusters/a.cue": "a: 1\n", "locks/c/e/a.lock.yaml": lockfile("1", "a", "")})
			lr.commit("change one", map[string]string{"clusters/a.cue": "a: 2\n"})
			relock := lr.commit("relock", tc.files)
			c2 := lr.commit("change two", map[string]string{"clusters/a.cue": "a: 3\n"})
			r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			un, err := r.UnlockedChanges(hashOf(t, c2), ".", "locks", 0)
			if err != nil {
				t.Fatal(err)
			}
			names := lr.subjects()
			wantBase, wantCommits := lock, "change one,change two"
			if tc.base {
				wantBase, wantCommits = relock, "change two"
			}
			if un.Base.String() != wantBase || shortList(un.Commits, names) != wantCommits {
				t.Errorf("base %s, commits %s; want %s, %s", names[un.Base.String()], shortList(un.Commits, names), names[wantBase], wantCommits)
			}
		})
	}
}

// TestLockedSequencesCountLockfilesCommittedWithoutTrailers: a lockfile a
// commit wrote that no trailer of it names (committed by hand) counts
// with its sequence, in the folder asked for, even after it is deleted; a
// lockfile a lock commit as styrminctl writes it names is not read (the
// trailer is what a lock commit records, and reading every lock commit's
// lockfiles would cost a lock of a large repository dearly).
func TestLockedSequencesCountLockfilesCommittedWithoutTrailers(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("styrmin: lock c/e/a=2\n\nStyrmin-Lock: c/e/a=2", map[string]string{"deploy/locks/c/e/a.lock.yaml": "kind: Instance\nsequence: 9\n"})
	lr.commit("locked by hand", map[string]string{
		"deploy/locks/c/e/b.lock.yaml":   "kind: Instance\nsequence: 4\nvalues:\n  sequence: 77\n",
		"deploy/locks/c/e/notes.txt":     "sequence: 50\n",
		"deploy/other/c/e/x.lock.yaml":   "sequence: 60\n",
		"deploy/locks/c/e/bad.lock.yaml": "sequence: 03\n",
	})
	lr.commit("delete by hand", map[string]string{"deploy/locks/c/e/b.lock.yaml": del})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head := hashOf(t, lr.git("rev-parse", "HEAD"))
	got, err := r.LockedSequences(head, "deploy", "locks")
	if want := map[string]int{"c/e/a": 2, "c/e/b": 4}; err != nil || !maps.Equal(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	// Another folder's locks are not this one's.
	if got, err := r.LockedSequences(head, ".", "locks"); err != nil || !maps.Equal(got, map[string]int{"c/e/a": 2}) {
		t.Errorf("the root folder: %v, %v; want only the trailer's c/e/a=2", got, err)
	}
}

// TestLockedSequencesCountTheLocksASquashMergeKeepsInItsBody: a squash
// merge of a pull request with two lock commits (d1=3, then d2=4) keeps
// both messages in its body, and only its last paragraph, d2's trailer,
// is read as trailers; reverted afterwards, d1's lockfile is back at 2.
// d1's 3 is used all the same, in a forge's message ("* subject" per
// commit, bodies kept, or only the subjects and the last trailer block:
// then d1's lockfile is read, the message being none CommitLocks writes)
// and in git's own (`git merge --squash`, indented): the next lock of d1
// must not be 3 again.
func TestLockedSequencesCountTheLocksASquashMergeKeepsInItsBody(t *testing.T) {
	for _, tc := range []struct {
		name    string
		message func(lr *localRepo) string
	}{
		{"a forge's message", func(*localRepo) string {
			return "Lock d1 and d2 (#12)\n\n* styrmin: lock d1\n\nStyrmin-Lock: c/e/d1=3\n\n* styrmin: lock d2\n\nStyrmin-Lock: c/e/d2=4"
		}},
		{"a forge's message keeping only the subjects", func(*localRepo) string {
			return "Lock d1 and d2 (#12)\n\n* styrmin: lock d1\n\n* styrmin: lock d2\n\nStyrmin-Lock: c/e/d2=4"
		}},
		{"git's squash message", func(lr *localRepo) string {
			b, err := os.ReadFile(filepath.Join(lr.dir, ".git", "SQUASH_MSG"))
			if err != nil {
				t.Fatal(err)
			}
			return "Lock d1 and d2\n\n" + string(b)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := newLocalRepo(t, false)
			lr.commit("styrmin: lock\n\nStyrmin-Lock: c/e/d1=2\nStyrmin-Lock: c/e/d2=3", map[string]string{
				"locks/c/e/d1.lock.yaml": "kind: Instance\nsequence: 2\n",
				"locks/c/e/d2.lock.yaml": "kind: Instance\nsequence: 3\n",
			})
			lr.git("checkout", "-q", "-b", "pr")
			lr.commit("styrmin: lock d1\n\nStyrmin-Lock: c/e/d1=3", map[string]string{"locks/c/e/d1.lock.yaml": "kind: Instance\nsequence: 3\n"})
			lr.commit("styrmin: lock d2\n\nStyrmin-Lock: c/e/d2=4", map[string]string{"locks/c/e/d2.lock.yaml": "kind: Instance\nsequence: 4\n"})
			lr.git("checkout", "-q", "main")
			lr.git("merge", "-q", "--squash", "pr")
			lr.commit(tc.message(lr), nil)
			lr.git("branch", "-q", "-D", "pr")
			lr.git("revert", "--no-edit", "HEAD")
			r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.LockedSequences(hashOf(t, lr.git("rev-parse", "HEAD")), ".", "locks")
			if want := map[string]int{"c/e/d1": 3, "c/e/d2": 4}; err != nil || !maps.Equal(got, want) {
				t.Fatalf("got %v, %v; want %v: d1's 3, in the squash merge's body, is used", got, err, want)
			}
		})
	}
}

// TestLockedSequencesReadTheLockfilesOfALockCommitAFixupRewrote: an
// interactive rebase folded d2's lock commit (d2=4) into d1's (fixup:
// d1's message, the two commits' lockfiles), and the result was reverted.
// The message is one CommitLocks writes, but the commit has a committer
// of its own, so its lockfiles are read: d2's 4 is used.
func TestLockedSequencesReadTheLockfilesOfALockCommitAFixupRewrote(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("styrmin: lock c/e/d1=2, c/e/d2=3\n\nStyrmin-Lock: c/e/d1=2\nStyrmin-Lock: c/e/d2=3", map[string]string{
		"locks/c/e/d1.lock.yaml": "kind: Instance\nsequence: 2\n",
		"locks/c/e/d2.lock.yaml": "kind: Instance\nsequence: 3\n",
	})
	lr.commit("styrmin: lock c/e/d1=3\n\nStyrmin-Lock: c/e/d1=3", map[string]string{"locks/c/e/d1.lock.yaml": "kind: Instance\nsequence: 3\n"})
	lr.n++ // the fixup happens later: the commit gets a new committer date
	lr.write(map[string]string{"locks/c/e/d2.lock.yaml": "kind: Instance\nsequence: 4\n"})
	lr.git("add", "--all", ".")
	lr.git("commit", "--quiet", "--amend", "--no-edit")
	lr.n++
	lr.git("revert", "--no-edit", "HEAD")
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.LockedSequences(hashOf(t, lr.git("rev-parse", "HEAD")), ".", "locks")
	if want := map[string]int{"c/e/d1": 3, "c/e/d2": 4}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("got %v, %v; want %v: d2's 4, in the rewritten commit's lockfile, is used", got, err, want)
	}
}

// TestLockedSequencesReadASquashsLockfileWhoseKeyItsBodyNames: a pull
// request locks d1 at 3 with styrminctl, then commits d1's lockfile at
// 4 by hand (no trailer); squash-merged, the body keeps "Styrmin-Lock:
// c/e/d1=3", and the lockfile the squash wrote holds 4. Reverted, d1's
// lockfile is back at 2: 4 is used all the same.
func TestLockedSequencesReadASquashsLockfileWhoseKeyItsBodyNames(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("styrmin: lock\n\nStyrmin-Lock: c/e/d1=2", map[string]string{"locks/c/e/d1.lock.yaml": "kind: Instance\nsequence: 2\n"})
	lr.git("checkout", "-q", "-b", "pr")
	lr.commit("styrmin: lock c/e/d1=3\n\nStyrmin-Lock: c/e/d1=3", map[string]string{"locks/c/e/d1.lock.yaml": "kind: Instance\nsequence: 3\n"})
	lr.commit("lock d1 again by hand", map[string]string{"locks/c/e/d1.lock.yaml": "kind: Instance\nsequence: 4\n"})
	lr.git("checkout", "-q", "main")
	lr.git("merge", "-q", "--squash", "pr")
	lr.commit("Lock d1 (#13)\n\n* styrmin: lock c/e/d1=3\n\nStyrmin-Lock: c/e/d1=3\n\n* lock d1 again by hand", nil)
	lr.git("branch", "-q", "-D", "pr")
	lr.git("revert", "--no-edit", "HEAD")
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.LockedSequences(hashOf(t, lr.git("rev-parse", "HEAD")), ".", "locks")
	if want := map[string]int{"c/e/d1": 4}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("got %v, %v; want %v: the squash's lockfile at 4 is used though its body names d1 at 3", got, err, want)
	}
}
