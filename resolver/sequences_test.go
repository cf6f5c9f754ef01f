package resolver

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/styrmin/styrmin/gitsource"
)

// reuseRepo is a bare repository holding the example repository on main,
// locked once; its helpers make branches, lock them and merge them as a
// forge does (a merge commit whose first parent is main).
type reuseRepo struct {
	t   *testing.T
	dir string
}

func newReuseRepo(t *testing.T) *reuseRepo {
	t.Helper()
	src := exampleCopy(t)
	files := map[string][]byte{}
	err := fs.WalkDir(os.DirFS(src), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(src + "/" + p)
		files[p] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &reuseRepo{t: t, dir: t.TempDir()}
	if _, err := git.PlainInit(r.dir, true); err != nil {
		t.Fatal(err)
	}
	commitFiles(t, r.open("main"), "configuration", files)
	r.lock("main")
	return r
}

// open opens the repository on branch, afresh (no answer kept).
func (r *reuseRepo) open(branch string) *gitsource.Repo {
	r.t.Helper()
	repo, err := gitsource.Open(r.dir, gitsource.OpenOptions{Branch: branch})
	if err != nil {
		r.t.Fatal(err)
	}
	return repo
}

func (r *reuseRepo) git() *git.Repository {
	r.t.Helper()
	gr, err := git.PlainOpen(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	return gr
}

func (r *reuseRepo) head(branch string) plumbing.Hash {
	r.t.Helper()
	ref, err := r.git().Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		r.t.Fatal(err)
	}
	return ref.Hash()
}

func (r *reuseRepo) setBranch(branch string, h plumbing.Hash) {
	r.t.Helper()
	if err := r.git().Storer.SetReference(plumbing.NewHashReference(plumbing.NewBranchReferenceName(branch), h)); err != nil {
		r.t.Fatal(err)
	}
}

// lock locks branch as `styrminctl lock --commit` does and returns its
// changes.
func (r *reuseRepo) lock(branch string) []LockChange {
	r.t.Helper()
	repo := r.open(branch)
	out, err := CommitLocksWith(context.Background(), repo, WorkspaceOptions{}, LockRequest{}, CommitOptions{History: repo})
	if err != nil {
		r.t.Fatalf("lock %s: %v", branch, err)
	}
	return out.Changes
}

// merge merges side into main with a merge commit whose tree is side's:
// a pull request branched from main's head, or one whose conflicts were
// resolved to its own side.
func (r *reuseRepo) merge(side string) {
	r.t.Helper()
	gr := r.git()
	tip, err := gr.CommitObject(r.head(side))
	if err != nil {
		r.t.Fatal(err)
	}
	sig := object.Signature{Name: "forge", Email: "forge@localhost", When: time.Unix(1_700_000_000, 0)}
	c := &object.Commit{Author: sig, Committer: sig, Message: "Merge pull request from " + side + "\n",
		TreeHash: tip.TreeHash, ParentHashes: []plumbing.Hash{r.head("main"), tip.Hash}}
	obj := gr.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		r.t.Fatal(err)
	}
	h, err := gr.Storer.SetEncodedObject(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	r.setBranch("main", h)
}

const reuseWebFile = "clusters/local/environments/dev/deployments/web.cue"

// lockedAt describes a new instance in a failure: its sequence and digest.
func lockedAt(in *Instance) string {
	if in == nil {
		return "nothing"
	}
	return fmt.Sprintf("%d (%s)", in.Sequence, in.Digest)
}

// TestALockfileMergedAtASequenceAnotherPullRequestLockedIsReused: pull
// requests A (web at 3 replicas) and B (the same and a message of its
// own), both branched from main, lock web at 2 each (lock commits as
// CommitLocksWith writes them), with different instances. A merges first
// (the agent runs A's instance at 2), then B, its conflicts resolved to
// its side: main's lockfile, B's, holds a number the history used for A's
// instance too, which the agent refuses ("sequence 2 does not follow 2").
// Reused says so for web alone; after A's merge alone nothing is reused.
func TestALockfileMergedAtASequenceAnotherPullRequestLockedIsReused(t *testing.T) {
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
			t.Fatalf("%s locked web at %s; want 2", branch, lockedAt(in))
		}
		return in
	}
	a := pr("pr-a", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	b := pr("pr-b", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 3, message: \"from B\"}\n")
	if a.Digest == b.Digest {
		t.Fatal("the two pull requests lock the same instance")
	}
	// What a lock of main reads: the sequences used, those reused and the
	// lockfiles at the head.
	reused := func() (ReusedSequences, map[ID]*Instance) {
		t.Helper()
		repo := r.open("main")
		head := gitsource.Hash(r.head("main"))
		keys, err := repo.ReusedSequences(head, ".", lockDir)
		if err != nil {
			t.Fatal(err)
		}
		fsys, err := repo.TreeAt(head, ".")
		if err != nil {
			t.Fatal(err)
		}
		locks, err := LoadLocks(fsys)
		if err != nil {
			t.Fatal(err)
		}
		return ReusedFromHistory(keys), locks
	}
	r.merge("pr-a")
	if got, _ := reused(); len(got) != 0 {
		t.Errorf("after A's merge %v are reused; want none", got)
	}
	r.merge("pr-b")
	got, locks := reused()
	if !maps.Equal(got, ReusedSequences{web: 2}) {
		t.Fatalf("after B's merge %v are reused; want web's 2", got)
	}
	in := locks[web]
	if in == nil {
		t.Fatal("main has no web lockfile")
	}
	if in.Sequence != 2 || in.Digest != b.Digest {
		t.Fatalf("main's web lockfile holds %s at %d; want B's instance (%s) at 2", in.Digest, in.Sequence, b.Digest)
	}
	if !got.Reuses(web, in) {
		t.Error("main's web lockfile, B's instance at 2, does not count as reused")
	}
	for id, in := range locks {
		if id != web && got.Reuses(id, in) {
			t.Errorf("%s at %d counts as reused; only web was locked twice", id, in.Sequence)
		}
	}
}
