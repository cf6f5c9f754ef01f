package gitsource_test

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
)

// describe renders changes as "<subject>: <path>" lines ("-<path>" for a
// deletion) so expectations read like a log.
func describe(changes []gitsource.LockChange, subjects map[string]string) []string {
	var out []string
	for _, c := range changes {
		p := c.Path
		if c.Deleted {
			p = "-" + p
		}
		out = append(out, subjects[c.Commit.String()]+": "+p)
	}
	return out
}

func TestLockChangesLinearHistory(t *testing.T) {
	lr := newLocalRepo(t, false)
	c1 := lr.commit("add a", map[string]string{"locks/c/e/a.lock.yaml": "1", "README": "x"})
	lr.commit("readme only", map[string]string{"README": "y"})
	c3 := lr.commit("modify a, add b, sibling dir", map[string]string{
		"locks/c/e/a.lock.yaml": "2", "locks/c/f/b.lock.yaml": "1", "locks-other/x": "ignored", "locksfile": "ignored",
	})
	lr.commit("delete a", map[string]string{"locks/c/e/a.lock.yaml": del})
	lr.commit("b becomes a directory", map[string]string{"locks/c/f/b.lock.yaml": del})
	lr.write(map[string]string{"locks/c/f/b.lock.yaml/inner": "1"})
	lr.commit("add inner", nil)
	c7 := lr.commit("remove the whole cluster dir", map[string]string{"locks/c": del})
	lr.commit("same content rewritten", map[string]string{"README": "y"})

	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	subjects := lr.subjects()
	head := mustResolve(t, r, "main")
	tests := []struct {
		name   string
		from   string
		to     gitsource.Hash
		prefix string
		want   []string
	}{
		{name: "from the root", prefix: "locks", to: head, want: []string{
			"add a: locks/c/e/a.lock.yaml",
			"modify a, add b, sibling dir: locks/c/e/a.lock.yaml",
			"modify a, add b, sibling dir: locks/c/f/b.lock.yaml",
			"delete a: -locks/c/e/a.lock.yaml",
			"b becomes a directory: -locks/c/f/b.lock.yaml",
			"add inner: locks/c/f/b.lock.yaml/inner",
			"remove the whole cluster dir: -locks/c/f/b.lock.yaml/inner",
		}},
		{name: "trailing slash in prefix", prefix: "locks/", from: c3, to: mustResolve(t, r, c7), want: []string{
			"delete a: -locks/c/e/a.lock.yaml",
			"b becomes a directory: -locks/c/f/b.lock.yaml",
			"add inner: locks/c/f/b.lock.yaml/inner",
			"remove the whole cluster dir: -locks/c/f/b.lock.yaml/inner",
		}},
		{name: "nested prefix", prefix: "locks/c/e", from: c1, to: head, want: []string{
			"modify a, add b, sibling dir: locks/c/e/a.lock.yaml",
			"delete a: -locks/c/e/a.lock.yaml",
		}},
		{name: "whole tree", prefix: "", from: c7, to: head, want: nil},
		{name: "from equals to", prefix: "locks", from: c3, to: mustResolve(t, r, c3), want: nil},
		{name: "to is an ancestor of from", prefix: "locks", from: c7, to: mustResolve(t, r, c3), want: nil},
		{name: "zero to", prefix: "locks", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var from gitsource.Hash
			if tt.from != "" {
				from = mustResolve(t, r, tt.from)
			}
			got, err := r.LockChanges(from, tt.to, tt.prefix)
			if err != nil {
				t.Fatal(err)
			}
			if d := describe(got, subjects); !equalStrings(d, tt.want) {
				t.Fatalf("LockChanges =\n%s\nwant\n%s", strings.Join(d, "\n"), strings.Join(tt.want, "\n"))
			}
			for _, c := range got {
				if c.Deleted != c.Blob.IsZero() {
					t.Errorf("%s: Deleted=%v but Blob=%s", c.Path, c.Deleted, c.Blob)
				}
			}
		})
	}
}

func TestLockChangesMergesAreOrderedByFirstParentAndNotDoubleCounted(t *testing.T) {
	lr := newLocalRepo(t, false)
	base := lr.commit("a1", map[string]string{"locks/a": "1"})
	lr.git("checkout", "--quiet", "-b", "side")
	lr.commit("b1 (side)", map[string]string{"locks/b": "1"})
	sideTip := lr.commit("b2 (side)", map[string]string{"locks/b": "2"})
	lr.git("checkout", "--quiet", "main")
	c2 := lr.commit("a2", map[string]string{"locks/a": "2"})
	lr.commit("readme", map[string]string{"README": "r"})
	lr.n++
	lr.git("merge", "--quiet", "--no-ff", "-m", "merge side", "side")
	// A merge that resolves a conflict reports the resolved file.
	lr.git("checkout", "--quiet", "-b", "side2")
	lr.commit("a3 (side2)", map[string]string{"locks/a": "3-side"})
	lr.git("checkout", "--quiet", "main")
	lr.commit("a3 (main)", map[string]string{"locks/a": "3-main"})
	lr.n++
	mergeConflict(t, lr, "side2", map[string]string{"locks/a": "3-merged"}, "merge side2 resolving a")
	lr.commit("a4", map[string]string{"locks/a": "4"})

	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	subjects := lr.subjects()
	head := mustResolve(t, r, "main")
	tests := []struct {
		name string
		from string
		want []string
	}{
		{name: "from the root", want: []string{
			"a1: locks/a", "a2: locks/a", "b1 (side): locks/b", "b2 (side): locks/b",
			"a3 (main): locks/a", "a3 (side2): locks/a", "merge side2 resolving a: locks/a", "a4: locks/a",
		}},
		{name: "from a mainline commit", from: c2, want: []string{
			"b1 (side): locks/b", "b2 (side): locks/b",
			"a3 (main): locks/a", "a3 (side2): locks/a", "merge side2 resolving a: locks/a", "a4: locks/a",
		}},
		{name: "from the side branch tip", from: sideTip, want: []string{
			"a2: locks/a", "a3 (main): locks/a", "a3 (side2): locks/a", "merge side2 resolving a: locks/a", "a4: locks/a",
		}},
		{name: "from the base", from: base, want: []string{
			"a2: locks/a", "b1 (side): locks/b", "b2 (side): locks/b",
			"a3 (main): locks/a", "a3 (side2): locks/a", "merge side2 resolving a: locks/a", "a4: locks/a",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var from gitsource.Hash
			if tt.from != "" {
				from = mustResolve(t, r, tt.from)
			}
			got, err := r.LockChanges(from, head, "locks")
			if err != nil {
				t.Fatal(err)
			}
			if d := describe(got, subjects); !equalStrings(d, tt.want) {
				t.Fatalf("LockChanges =\n%s\nwant\n%s", strings.Join(d, "\n"), strings.Join(tt.want, "\n"))
			}
			// Same inputs, same answer.
			again, _ := r.LockChanges(from, head, "locks")
			if !equalStrings(describe(again, subjects), describe(got, subjects)) {
				t.Fatal("LockChanges is not deterministic")
			}
		})
	}
}

// mergeConflict merges branch into the current branch, resolving the
// conflict with files.
func mergeConflict(t *testing.T, lr *localRepo, branch string, files map[string]string, message string) {
	t.Helper()
	// git merge exits 1 on a conflict.
	lr.gitAllowFail("merge", "--quiet", "--no-ff", "-m", message, branch)
	lr.write(files)
	lr.git("add", "--all", ".")
	lr.git("commit", "--quiet", "--no-edit")
}

func TestLockChangesParsesLockTrailers(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("styrmin: lock c/e/a=1\n\nStyrmin-Lock: c/e/a=1\nStyrmin-Lock: c/e/b=4", map[string]string{"locks/c/e/a.lock.yaml": "1", "locks/c/e/b.lock.yaml": "4"})
	lr.commit("hand edit", map[string]string{"locks/c/e/a.lock.yaml": "x"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.LockChanges(gitsource.Hash{}, mustResolve(t, r, "HEAD"), "locks")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d changes, want 3", len(got))
	}
	want := map[string]int{"c/e/a": 1, "c/e/b": 4}
	if !maps.Equal(got[0].Locks, want) || !maps.Equal(got[1].Locks, want) || len(got[2].Locks) != 0 {
		t.Fatalf("Locks = %v, %v, %v", got[0].Locks, got[1].Locks, got[2].Locks)
	}
	// One map per commit, not a copy per change: a commit locking 500
	// deployments has 500 changes.
	if reflect.ValueOf(got[0].Locks).UnsafePointer() != reflect.ValueOf(got[1].Locks).UnsafePointer() {
		t.Fatal("the changes of one commit each hold a copy of its Locks map")
	}
	if got[0].Time.Unix() != 1_700_000_060 {
		t.Fatalf("Time = %v", got[0].Time)
	}
}

// TestLockChangesSkipsABadTrailerAndGoesOn: a malformed trailer is left
// out of Locks and reported in BadTrailers, and the walk goes on past it.
func TestLockChangesSkipsABadTrailerAndGoesOn(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("lock\n\nStyrmin-Lock: c/e/a=one\nStyrmin-Lock: c/e/b=2", map[string]string{"locks/a": "1", "locks/b": "2"})
	lr.commit("styrmin: lock\n\nStyrmin-Lock: c/e/a=3", map[string]string{"locks/a": "3"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.LockChanges(gitsource.Hash{}, mustResolve(t, r, "HEAD"), "locks")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d changes, want 3 (the walk goes on past the bad trailer)", len(got))
	}
	if !maps.Equal(got[0].Locks, map[string]int{"c/e/b": 2}) || len(got[0].BadTrailers) != 1 || !strings.Contains(got[0].BadTrailers[0].Error(), `"one"`) {
		t.Fatalf("first commit: Locks %v, BadTrailers %v; want c/e/b=2 and the bad value named", got[0].Locks, got[0].BadTrailers)
	}
	if !maps.Equal(got[2].Locks, map[string]int{"c/e/a": 3}) || len(got[2].BadTrailers) != 0 {
		t.Fatalf("second commit: Locks %v, BadTrailers %v", got[2].Locks, got[2].BadTrailers)
	}
}

func TestLockChangesRejectsBadPrefixAndUnknownCommits(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("c", map[string]string{"locks/a": "1"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head := mustResolve(t, r, "HEAD")
	if _, err := r.LockChanges(gitsource.Hash{}, head, "../locks"); err == nil {
		t.Error("prefix ../locks accepted")
	}
	unknown, _ := gitsource.ParseHash(strings.Repeat("ab", 20))
	if _, err := r.LockChanges(unknown, head, "locks"); !errors.Is(err, gitsource.ErrCommitNotFound) || !strings.Contains(err.Error(), unknown.String()) {
		t.Errorf("unknown from: err = %v, want ErrCommitNotFound naming %s", err, unknown)
	}
	if _, err := r.FS(unknown); !errors.Is(err, gitsource.ErrCommitNotFound) {
		t.Errorf("FS of an unknown commit: err = %v, want ErrCommitNotFound", err)
	}
}

func TestMessageReadsACommitsMessageAndNamesAMissingOne(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("styrmin: retry c/e/a=2\n\nStyrmin-Lock: c/e/a=2\nStyrmin-Retry: c/e/a", map[string]string{"locks/c/e/a.lock.yaml": "2"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := r.Message(mustResolve(t, r, "HEAD"))
	if err != nil || !strings.Contains(msg, "Styrmin-Retry: c/e/a") {
		t.Fatalf("Message = %q, %v", msg, err)
	}
	missing, _ := gitsource.ParseHash(strings.Repeat("ab", 20))
	if _, err := r.Message(missing); !errors.Is(err, gitsource.ErrCommitNotFound) {
		t.Fatalf("a missing commit: %v, want ErrCommitNotFound", err)
	}
}

// TestDescendsTellsAForwardMoveFromARewrite: a branch moved forward
// descends from where it was; one reset to an older commit and given a new
// commit does not, nor does a commit the repository never held.
func TestDescendsTellsAForwardMoveFromARewrite(t *testing.T) {
	lr := newLocalRepo(t, false)
	first := lr.commit("one", map[string]string{"a": "1"})
	second := lr.commit("two", map[string]string{"a": "2"})
	lr.git("reset", "-q", "--hard", first)
	rewritten := lr.commit("two again", map[string]string{"a": "3"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := func(s string) gitsource.Hash { return hashOf(t, s) }
	unknown, _ := gitsource.ParseHash(strings.Repeat("ab", 20))
	for _, tc := range []struct {
		name       string
		head, from gitsource.Hash
		want       bool
	}{
		{"forward", h(second), h(first), true},
		{"same commit", h(second), h(second), true},
		{"from the root", h(second), gitsource.Hash{}, true},
		{"rewound and rewritten", h(rewritten), h(second), false},
		{"backwards", h(first), h(second), false},
		{"unknown commit", h(rewritten), unknown, false},
	} {
		if got, err := r.Descends(tc.head, tc.from); err != nil || got != tc.want {
			t.Errorf("%s: Descends = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}
