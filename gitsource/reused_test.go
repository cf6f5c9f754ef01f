package gitsource_test

import (
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
)

// TestReusedSequencesNameANumberTwoMergedPullRequestsLockedForTwoInstances:
// pull requests A and B, branched from one commit, each lock web at 2 for
// a change of its own (lock commits as styrminctl writes them, taken at
// their trailers' word). Merged one after the other, B's conflict resolved
// to its side by a merge commit or a squash, 2 is used for two instances:
// ReusedSequences says so, also when the answer at A's merge was kept and
// the walk stops there. The same instance locked by both (two blobs, their
// sourceCommit apart, one digest) reuses nothing, nor does a lock of web
// at 3 after the merge.
func TestReusedSequencesNameANumberTwoMergedPullRequestsLockedForTwoInstances(t *testing.T) {
	const web = "deploy/locks/c/e/web.lock.yaml"
	lockfile := func(seq, digest, source string) string {
		return "# written by styrminctl lock\napiVersion: styrmin.io/v1alpha1\ndigest: sha256:" + digest +
			"\nkind: Instance\nsequence: " + seq + "\nsourceCommit: " + source + "\n"
	}
	lockMessage := func(seq string) string { return "styrmin: lock c/e/web=" + seq + "\n\nStyrmin-Lock: c/e/web=" + seq }
	for _, tc := range []struct {
		name    string
		bDigest string // the digest B locks at 2
		squash  bool   // B is squash-merged
		want    map[string]int
	}{
		{"merge commits", "b", false, map[string]int{"c/e/web": 2}},
		{"B squash-merged", "b", true, map[string]int{"c/e/web": 2}},
		{"one instance locked by both", "a", false, map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := newLocalRepo(t, false)
			lr.commit(lockMessage("1"), map[string]string{web: lockfile("1", "0", "c0")})
			lr.git("checkout", "-q", "-b", "pr-a")
			lr.commit(lockMessage("2"), map[string]string{web: lockfile("2", "a", "ca")})
			lr.git("checkout", "-q", "-b", "pr-b", "main")
			lr.commit(lockMessage("2"), map[string]string{web: lockfile("2", tc.bDigest, "cb")})
			lr.git("checkout", "-q", "main")
			lr.n++
			lr.git("merge", "-q", "--no-ff", "-m", "Merge pull request #1 from pr-a", "pr-a")
			r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			head := func() gitsource.Hash { return hashOf(t, lr.git("rev-parse", "HEAD")) }
			if got, err := r.ReusedSequences(head(), "deploy", "locks"); err != nil || len(got) != 0 {
				t.Fatalf("after A's merge: %v, %v; want nothing reused", got, err)
			}
			lr.n++
			b := map[string]string{web: lockfile("2", tc.bDigest, "cb")}
			if tc.squash {
				lr.gitAllowFail("merge", "-q", "--squash", "pr-b")
				lr.commit("Lock web (#2)\n\n* styrmin: lock c/e/web=2\n\nStyrmin-Lock: c/e/web=2", b)
			} else {
				mergeConflict(t, lr, "pr-b", b, "Merge pull request #2 from pr-b")
			}
			got, err := r.ReusedSequences(head(), "deploy", "locks")
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("after B's merge: %v, %v; want %v", got, err, tc.want)
			}
			if seqs, err := r.LockedSequences(head(), "deploy", "locks"); err != nil || !maps.Equal(seqs, map[string]int{"c/e/web": 2}) {
				t.Errorf("LockedSequences after B's merge: %v, %v; want web at 2", seqs, err)
			}
			// A fresh walk (no answer kept) gives the same.
			fresh, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if again, err := fresh.ReusedSequences(head(), "deploy", "locks"); err != nil || !maps.Equal(again, tc.want) {
				t.Errorf("a fresh walk after B's merge: %v, %v; want %v", again, err, tc.want)
			}
			lr.commit(lockMessage("3"), map[string]string{web: lockfile("3", tc.bDigest, "cm")})
			if got, err := r.ReusedSequences(head(), "deploy", "locks"); err != nil || len(got) != 0 {
				t.Errorf("after web's lock at 3: %v, %v; want nothing reused", got, err)
			}
		})
	}
}

// TestAPartialClonesMissingLockfileIsNamedWithTheFix: a clone with
// --filter=blob:none (actions/checkout's filter) holds the lockfiles of
// the head only; git fetches the others on demand, go-git cannot. The
// sequences of lockfiles committed without trailers (a hand lock) are read
// from their blobs, and the error named only a hash ("blob …: object not
// found"); it now says the clone is partial and how to get what it lacks.
func TestAPartialClonesMissingLockfileIsNamedWithTheFix(t *testing.T) {
	origin := newLocalRepo(t, false)
	origin.commit("lock by hand", map[string]string{"locks/c/e/app.lock.yaml": "sequence: 1\n"})
	origin.commit("lock by hand again", map[string]string{"locks/c/e/app.lock.yaml": "sequence: 2\n"})
	origin.git("config", "uploadpack.allowFilter", "true")
	clone := newLocalRepo(t, false)
	clone.git("clone", "--quiet", "--filter=blob:none", "file://"+origin.dir, "partial")
	r, err := gitsource.Open(filepath.Join(clone.dir, "partial"), gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head, err := r.Resolve("HEAD")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.LockedSequences(head, ".", "locks")
	if !errors.Is(err, gitsource.ErrPartialClone) || !strings.Contains(err.Error(), "clone without a filter") {
		t.Fatalf("the sequences of a partial clone: %v; want ErrPartialClone saying how to clone", err)
	}
}
