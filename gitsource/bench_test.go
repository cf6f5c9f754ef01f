package gitsource_test

import (
	"context"
	"fmt"
	"io/fs"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// lockHistory builds a bare repository with n lock commits, each bumping
// one of 20 deployments' lockfiles (and a config file now and then), and
// returns its directory.
func lockHistory(b *testing.B, n int) string {
	b.Helper()
	lr := newLocalRepo(b, true)
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range n {
		name := fmt.Sprintf("app%02d", i%20)
		_, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(_ context.Context, _ gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
			p := "locks/c/e/" + name + ".lock.yaml"
			seq, err := readSequence(headFS, p)
			if err != nil {
				return gitsource.Change{}, err
			}
			files := map[string][]byte{p: fmt.Appendf(nil, "sequence: %d\n", seq+1)}
			if i%7 == 0 {
				files["clusters/c/environments/e/deployments/"+name+".cue"] = fmt.Appendf(nil, "replicas: %d\n", i)
			}
			return gitsource.Change{Files: files, Locks: map[string]int{"c/e/" + name: seq + 1}}, nil
		}})
		if err != nil {
			b.Fatal(err)
		}
	}
	lr.git("gc", "--quiet")
	return lr.dir
}

// BenchmarkLockChanges walks a history of 500 lock commits: all of it (an
// agent's first sync) and the newest commit (a poll after one lock), in an
// in-memory clone (the agent) and a packed repository on disk (the CLI).
func BenchmarkLockChanges(b *testing.B) {
	const commits = 500
	dir := lockHistory(b, commits)
	mem, err := gitsource.Clone(context.Background(), dir, "", gitsource.CloneOptions{})
	if err != nil {
		b.Fatal(err)
	}
	disk, err := gitsource.Open(dir, gitsource.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, store := range []struct {
		name string
		r    *gitsource.Repo
	}{{"memory", mem}, {"disk", disk}} {
		head := mustResolve(b, store.r, "main")
		parent := mustResolve(b, store.r, "main~1")
		for _, span := range []struct {
			name string
			from gitsource.Hash
			want int
		}{{"all-500", gitsource.Hash{}, commits}, {"last-1", parent, 1}} {
			b.Run(store.name+"/"+span.name, func(b *testing.B) {
				for b.Loop() {
					changes, err := store.r.LockChanges(span.from, head, "locks")
					if err != nil {
						b.Fatal(err)
					}
					if len(changes) != span.want {
						b.Fatalf("%d changes, want %d", len(changes), span.want)
					}
				}
			})
		}
	}
}

// BenchmarkFSReadFile reads one lockfile at a commit, through a new FS each
// time (a fresh read of a commit) and through one reused FS.
func BenchmarkFSReadFile(b *testing.B) {
	dir := lockHistory(b, 100)
	for _, mode := range []string{"memory", "disk"} {
		var r *gitsource.Repo
		var err error
		if mode == "memory" {
			r, err = gitsource.Clone(context.Background(), dir, "", gitsource.CloneOptions{})
		} else {
			r, err = gitsource.Open(dir, gitsource.OpenOptions{})
		}
		if err != nil {
			b.Fatal(err)
		}
		head := mustResolve(b, r, "main")
		b.Run(mode+"/new-fs", func(b *testing.B) {
			for b.Loop() {
				fsys, err := r.FS(head)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := fs.ReadFile(fsys, "locks/c/e/app07.lock.yaml"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode+"/same-fs", func(b *testing.B) {
			fsys, err := r.FS(head)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := fs.ReadFile(fsys, "locks/c/e/app07.lock.yaml"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFetchUnchanged measures the poll that finds the remote head where
// it was, over HTTP to git http-backend.
func BenchmarkFetchUnchanged(b *testing.B) {
	srv := gitserver.New(b)
	url, _ := srv.CreateRepo("cfg.git")
	srv.Commit("cfg.git", "seed", map[string][]byte{"locks/c/e/a.lock.yaml": []byte("sequence: 1\n")})
	r, err := gitsource.Clone(context.Background(), url, "", gitsource.CloneOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := r.Fetch(context.Background())
		if err != nil || res.Moved {
			b.Fatalf("Fetch = %+v, %v", res, err)
		}
	}
}

// BenchmarkCommitLocksHTTP measures one uncontended lock: fetch, build,
// write objects and push, over HTTP to git http-backend.
func BenchmarkCommitLocksHTTP(b *testing.B) {
	srv := gitserver.New(b)
	url, _ := srv.CreateRepo("cfg.git")
	srv.Commit("cfg.git", "seed", map[string][]byte{"styrmin.cue": []byte("x: 1\n")})
	r, err := gitsource.Clone(context.Background(), url, "", gitsource.CloneOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := r.CommitLocks(context.Background(), gitsource.CommitRequest{Build: bumpSequence})
		if err != nil || !res.Committed || res.Attempts != 1 {
			b.Fatalf("CommitLocks = %+v, %v", res, err)
		}
	}
}

// BenchmarkLockedSequences reads the sequences a history used, as every
// CLI lock does once (a fresh repository, no answer kept), from a packed
// repository on disk: 2,000 lock commits, and 2,000 lock commits each
// after a configuration commit (no trailers: the commits whose lockfiles
// may have been committed by hand).
func BenchmarkLockedSequences(b *testing.B) {
	for _, h := range []struct {
		name   string
		config bool
	}{{"locks-2000", false}, {"locks-and-config-4000", true}} {
		b.Run(h.name, func(b *testing.B) {
			dir := lockHistory(b, 2000)
			if h.config {
				dir = lockAndConfigHistory(b, 2000)
			}
			for b.Loop() {
				r, err := gitsource.Open(dir, gitsource.OpenOptions{})
				if err != nil {
					b.Fatal(err)
				}
				got, err := lockedSequences(r, mustResolve(b, r, "main"))
				if err != nil || len(got) != 20 {
					b.Fatalf("%d deployments, %v; want 20", len(got), err)
				}
			}
		})
	}
}

// lockAndConfigHistory is lockHistory with a configuration commit (no
// trailers) before each lock commit.
func lockAndConfigHistory(b *testing.B, n int) string {
	b.Helper()
	lr := newLocalRepo(b, true)
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range n {
		name := fmt.Sprintf("app%02d", i%20)
		cfg := "clusters/c/environments/e/deployments/" + name + ".cue"
		if _, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
			return gitsource.Change{Files: map[string][]byte{cfg: fmt.Appendf(nil, "replicas: %d\n", i)}, Subject: "config"}, nil
		}}); err != nil {
			b.Fatal(err)
		}
		_, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(_ context.Context, _ gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
			p := "locks/c/e/" + name + ".lock.yaml"
			seq, err := readSequence(headFS, p)
			if err != nil {
				return gitsource.Change{}, err
			}
			return gitsource.Change{Files: map[string][]byte{p: fmt.Appendf(nil, "sequence: %d\n", seq+1)}, Locks: map[string]int{"c/e/" + name: seq + 1}}, nil
		}})
		if err != nil {
			b.Fatal(err)
		}
	}
	lr.git("gc", "--quiet")
	return lr.dir
}

// lockedSequences is Repo.LockedSequences of the root folder's locks.
func lockedSequences(r *gitsource.Repo, head gitsource.Hash) (map[string]int, error) {
	return r.LockedSequences(head, ".", "locks")
}
