package gitsource_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

const appLock = "locks/c/e/app.lock.yaml"

// readSequence parses "sequence: N" from a lockfile at the head (0 when
// the file does not exist). Parsing lockfiles is the resolver's job; this
// is a test stand-in.
func readSequence(fsys fs.FS, path string) (int, error) {
	b, err := fs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "sequence: ")
	if !ok {
		return 0, fmt.Errorf("%s: %q has no sequence", path, b)
	}
	return strconv.Atoi(s)
}

// bumpSequence is a BuildFunc that renumbers appLock from the head it is
// given, as a real locker does.
func bumpSequence(_ context.Context, _ gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
	n, err := readSequence(headFS, appLock)
	if err != nil {
		return gitsource.Change{}, err
	}
	return gitsource.Change{
		Files: map[string][]byte{appLock: fmt.Appendf(nil, "sequence: %d\n", n+1)},
		Locks: map[string]int{"c/e/app": n + 1},
	}, nil
}

func TestCommitLocksLocalWorktreeStaysClean(t *testing.T) {
	ctx := context.Background()
	lr := newLocalRepo(t, false)
	base := lr.commit("config", map[string]string{"styrmin.cue": "x: 1\n", "locks/c/e/old.lock.yaml": "sequence: 3\n"})
	// Unrelated work in progress must survive untouched and uncommitted.
	lr.write(map[string]string{"styrmin.cue": "x: 2\n", "notes.txt": "draft\n", "staged.txt": "staged\n"})
	lr.git("add", "staged.txt")
	statusBefore := lr.git("status", "--porcelain")

	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var builtOn gitsource.Hash
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(ctx context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
		builtOn = head
		// headFS is the commit, not the worktree.
		if b, _ := fs.ReadFile(headFS, "styrmin.cue"); string(b) != "x: 1\n" {
			t.Errorf("headFS styrmin.cue = %q, want the committed content", b)
		}
		return gitsource.Change{
			Files: map[string][]byte{
				appLock:                   []byte("sequence: 1\n"),
				"locks/c/e/old.lock.yaml": nil,
				"locks/c/f/new.lock.yaml": []byte("sequence: 1\n"),
			},
			Locks:    map[string]int{"c/e/app": 1, "c/f/new": 1},
			Trailers: []gitsource.Trailer{{Key: "Styrmin-Source", Value: base}},
		}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Committed || res.Attempts != 1 || builtOn.String() != base || res.Parent.String() != base {
		t.Fatalf("result = %+v (built on %s), want one commit on %s", res, builtOn, base)
	}
	if head := lr.git("rev-parse", "HEAD"); head != res.Commit.String() {
		t.Fatalf("HEAD = %s, want %s", head, res.Commit)
	}
	if got := lr.git("status", "--porcelain"); got != statusBefore {
		t.Fatalf("git status after commit:\n%s\nwant (as before):\n%s", got, statusBefore)
	}
	if got := lr.git("diff-files", "--name-only"); got != "styrmin.cue" {
		t.Fatalf("git diff-files (no index refresh) = %q, want only the user's edit", got)
	}
	if got, want := lr.git("log", "-1", "--format=%an <%ae>%n%B"), "styrmin <styrmin@localhost>\nstyrmin: lock c/e/app=1, c/f/new=1\n\nStyrmin-Lock: c/e/app=1\nStyrmin-Lock: c/f/new=1\nStyrmin-Source: "+base; got != want {
		t.Fatalf("commit message:\n%s\nwant:\n%s", got, want)
	}
	if got, want := lr.git("show", "--format=", "--name-status", "HEAD"), "A\tlocks/c/e/app.lock.yaml\nD\tlocks/c/e/old.lock.yaml\nA\tlocks/c/f/new.lock.yaml"; got != want {
		t.Fatalf("commit content:\n%s\nwant:\n%s", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(lr.dir, "locks/c/f/new.lock.yaml")); err != nil || string(b) != "sequence: 1\n" {
		t.Fatalf("worktree file = %q, %v", b, err)
	}

	// Deleting the last file of a directory removes the directory, as git does.
	if _, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{Files: map[string][]byte{"locks/c/f/new.lock.yaml": nil}, Summary: "delete c/f/new"}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(lr.dir, "locks/c/f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("locks/c/f still exists: %v", err)
	}
	if got := lr.git("status", "--porcelain"); got != statusBefore {
		t.Fatalf("git status after delete:\n%s\nwant:\n%s", got, statusBefore)
	}
	lr.git("fsck", "--strict", "--no-progress")
}

func TestCommitLocksRefusesDirtyLockfiles(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(lr *localRepo)
		where string
	}{
		{"modified in worktree", func(lr *localRepo) { lr.write(map[string]string{appLock: "sequence: 9\n"}) }, "worktree"},
		{"staged", func(lr *localRepo) { lr.write(map[string]string{appLock: "sequence: 9\n"}); lr.git("add", appLock) }, "index"},
		{"deleted in worktree", func(lr *localRepo) { lr.write(map[string]string{appLock: del}) }, "worktree"},
		{"untracked where a new file goes", func(lr *localRepo) { lr.write(map[string]string{"locks/c/e/new.lock.yaml": "mine"}) }, "worktree"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr := newLocalRepo(t, false)
			base := lr.commit("base", map[string]string{appLock: "sequence: 1\n"})
			tt.setup(lr)
			r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
				return gitsource.Change{Files: map[string][]byte{appLock: []byte("sequence: 2\n"), "locks/c/e/new.lock.yaml": []byte("sequence: 1\n")}}, nil
			}})
			if !errors.Is(err, gitsource.ErrDirtyWorktree) || !strings.Contains(err.Error(), tt.where) {
				t.Fatalf("err = %v, want ErrDirtyWorktree in the %s", err, tt.where)
			}
			if tt.where == "index" && !strings.Contains(err.Error(), "git checkout HEAD -- "+appLock) {
				t.Fatalf("err = %v, want how to restore the file a lock killed while it committed left", err)
			}
			if head := lr.git("rev-parse", "HEAD"); head != base {
				t.Fatalf("HEAD moved to %s", head)
			}
		})
	}
}

func TestCommitLocksWithNoChangeMakesNoCommit(t *testing.T) {
	ctx := context.Background()
	lr := newLocalRepo(t, true)
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// An unborn branch and an empty change: nothing at all.
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{Files: map[string][]byte{"locks/none": nil}}, nil
	}})
	if err != nil || res.Committed || !res.Commit.IsZero() {
		t.Fatalf("result = %+v, %v; want nothing committed", res, err)
	}
	// The first lock creates the branch in a bare repository.
	first, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence})
	if err != nil || !first.Committed || !first.Parent.IsZero() {
		t.Fatalf("first = %+v, %v", first, err)
	}
	// Writing the same bytes again changes nothing.
	same, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{Files: map[string][]byte{appLock: []byte("sequence: 1\n")}, Locks: map[string]int{"c/e/app": 1}}, nil
	}})
	if err != nil || same.Committed || same.Commit != first.Commit {
		t.Fatalf("same = %+v, %v; want no commit, head %s", same, err, first.Commit)
	}
	if got := lr.git("rev-list", "--count", "main"); got != "1" {
		t.Fatalf("commits on main = %s, want 1", got)
	}
}

func TestCommitLocksRejectsBadChangesAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		change  gitsource.Change
		wantErr error
		wantMsg string
	}{
		{"parent escape", gitsource.Change{Files: map[string][]byte{"../x": []byte("1")}}, gitsource.ErrInvalidPath, "clean relative path"},
		{"absolute", gitsource.Change{Files: map[string][]byte{"/etc/x": []byte("1")}}, gitsource.ErrInvalidPath, "clean relative path"},
		{"double slash", gitsource.Change{Files: map[string][]byte{"locks//x": []byte("1")}}, gitsource.ErrInvalidPath, "clean relative path"},
		{"dot git", gitsource.Change{Files: map[string][]byte{"locks/.git/config": []byte("1")}}, gitsource.ErrInvalidPath, ".git"},
		{"dot git case", gitsource.Change{Files: map[string][]byte{".GIT/x": []byte("1")}}, gitsource.ErrInvalidPath, ".git"},
		{"backslash", gitsource.Change{Files: map[string][]byte{`locks\x`: []byte("1")}}, gitsource.ErrInvalidPath, "contains"},
		{"write over a directory", gitsource.Change{Files: map[string][]byte{"locks/c": []byte("1")}}, gitsource.ErrInvalidPath, "is a directory"},
		{"file used as directory", gitsource.Change{Files: map[string][]byte{appLock + "/x": []byte("1")}}, gitsource.ErrInvalidPath, "is a file"},
		{"file and dir in one change", gitsource.Change{Files: map[string][]byte{"a/b": []byte("1"), "a/b/c": []byte("1")}}, gitsource.ErrInvalidPath, "also"},
		{"bad lock key", gitsource.Change{Files: map[string][]byte{appLock: []byte("2")}, Locks: map[string]int{"c e": 2}}, nil, "deployment key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr := newLocalRepo(t, false)
			base := lr.commit("base", map[string]string{appLock: "sequence: 1\n"})
			r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
				return tt.change, nil
			}})
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.wantErr, tt.wantMsg)
			}
			if res.Attempts != 1 {
				t.Fatalf("Attempts = %d; bad input must not be retried", res.Attempts)
			}
			if head := lr.git("rev-parse", "HEAD"); head != base {
				t.Fatalf("HEAD moved to %s", head)
			}
			if st := lr.git("status", "--porcelain"); st != "" {
				t.Fatalf("worktree changed:\n%s", st)
			}
		})
	}
}

func TestCommitLocksReturnsBuildErrorsAtOnce(t *testing.T) {
	lr := newLocalRepo(t, false)
	lr.commit("base", map[string]string{"x": "1"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("resolve failed: clusters/c/cluster.cue: field domain")
	res, err := r.CommitLocks(context.Background(), gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{}, boom
	}})
	if !errors.Is(err, boom) || res.Attempts != 1 {
		t.Fatalf("err = %v after %d attempts, want the build error after 1", err, res.Attempts)
	}
}

func TestCommitLocksPushesOverHTTP(t *testing.T) {
	ctx := context.Background()
	const token = "push-token"
	srv := gitserver.New(t, gitserver.WithToken(token))
	url, dir := srv.CreateRepo("cfg.git")
	seed := srv.Commit("cfg.git", "seed", map[string][]byte{"styrmin.cue": []byte("x: 1\n")})

	r, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{Auth: gitsource.Auth{Token: token}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Committed || res.Parent.String() != seed || srv.Head("cfg.git", "main") != res.Commit.String() {
		t.Fatalf("result = %+v; remote main = %s", res, srv.Head("cfg.git", "main"))
	}
	if h, _ := r.Head(); h != res.Commit {
		t.Fatalf("Head after push = %s, want %s", h, res.Commit)
	}
	if h := mustResolve(t, r, "main"); h != res.Commit {
		t.Fatalf("Resolve(main) after push = %s, want %s", h, res.Commit)
	}
	srv.Git(dir, "fsck", "--strict", "--no-progress")
	if got := srv.Git(dir, "show", "main:"+appLock); got != "sequence: 1" {
		t.Fatalf("remote lockfile = %q", got)
	}
}

func TestCommitLocksCreatesTheBranchOnAnEmptyRemote(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t)
	_, dir := srv.CreateRepo("empty.git")
	lr := newLocalRepo(t, false)
	lr.git("remote", "add", "origin", srv.RepoURL("empty.git"))
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{Remote: "origin"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Fetch(ctx); !errors.Is(err, gitsource.ErrBranchNotFound) {
		t.Fatalf("Fetch of an empty remote: err = %v, want ErrBranchNotFound", err)
	}
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence})
	if err != nil || !res.Committed || !res.Parent.IsZero() {
		t.Fatalf("result = %+v, %v", res, err)
	}
	if got := srv.Head("empty.git", "main"); got != res.Commit.String() {
		t.Fatalf("remote main = %q, want %s", got, res.Commit)
	}
	srv.Git(dir, "fsck", "--strict", "--no-progress")
}

// TestCommitLocksOfAnExistingBranchRefusesOneThatIsNot: with
// ExistingBranch a branch missing on the remote is no empty tree to
// build on: the error names the remote and branch, and the branch the
// local one tracks when its name differs; nothing is built or pushed.
func TestCommitLocksOfAnExistingBranchRefusesOneThatIsNot(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t)
	url, _ := srv.CreateRepo("cfg.git")
	srv.Commit("cfg.git", "seed", map[string][]byte{appLock: []byte("sequence: 1\n")})
	lr := newLocalRepo(t, false)
	lr.git("remote", "add", "origin", url)
	lr.git("fetch", "--quiet", "origin")
	lr.git("checkout", "--quiet", "-b", "work", "--track", "origin/main")
	for _, tc := range []struct {
		branch, want string
		upstream     string
	}{
		{"", "gitsource: branch origin/work does not exist: " + url + " has no branch work (the local branch work tracks origin/main)", "main"},
		{"mian", "gitsource: branch origin/mian does not exist: " + url + " has no branch mian", ""},
	} {
		r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{Remote: "origin", Branch: tc.branch})
		if err != nil {
			t.Fatal(err)
		}
		built := false
		_, err = r.CommitLocks(ctx, gitsource.CommitRequest{ExistingBranch: true, Build: func(ctx context.Context, h gitsource.Hash, fsys fs.FS) (gitsource.Change, error) {
			built = true
			return bumpSequence(ctx, h, fsys)
		}})
		e, ok := errors.AsType[*gitsource.BranchNotFoundError](err)
		if !ok || !errors.Is(err, gitsource.ErrBranchNotFound) || err.Error() != tc.want || e.Upstream != tc.upstream || built {
			t.Errorf("branch %q: err = %v (built %v), want %q", tc.branch, err, built, tc.want)
		}
	}
	if got := srv.Git(srv.Dir("cfg.git"), "for-each-ref", "--format=%(refname)"); got != "refs/heads/main" {
		t.Errorf("the remote's branches are now:\n%s", got)
	}
}

// TestAShallowClonesMissingCommitSaysItIsShallow: a walk that reaches
// past a shallow clone's history names the cause and the fix, not only
// the commit it misses.
func TestAShallowClonesMissingCommitSaysItIsShallow(t *testing.T) {
	src := newLocalRepo(t, false)
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(src.dir, "f"), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
		src.git("add", "f")
		src.git("commit", "--quiet", "-m", fmt.Sprint(i))
	}
	dst := newLocalRepo(t, false)
	dst.git("fetch", "--quiet", "--depth", "1", "file://"+src.dir, "main")
	dst.git("reset", "--quiet", "--hard", "FETCH_HEAD")
	r, err := gitsource.Open(dst.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head := mustResolve(t, r, "HEAD")
	_, err = r.LockedSequences(head, ".", "locks")
	if !errors.Is(err, gitsource.ErrShallow) || !errors.Is(err, gitsource.ErrCommitNotFound) || !strings.Contains(err.Error(), "git fetch --unshallow") {
		t.Fatalf("LockedSequences in a shallow clone: err = %v, want ErrShallow and ErrCommitNotFound", err)
	}
}

func TestCommitLocksRetriesWhenTheBranchMoves(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t)
	url, _ := srv.CreateRepo("cfg.git")
	srv.Commit("cfg.git", "seed", map[string][]byte{appLock: []byte("sequence: 1\n")})
	r, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var heads []string
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{
		Backoff: gitsource.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
		Build: func(ctx context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
			heads = append(heads, head.String())
			if len(heads) == 1 {
				// Another locker wins the race between our fetch and push.
				srv.Commit("cfg.git", "styrmin: lock c/e/app=2", map[string][]byte{appLock: []byte("sequence: 2\n"), "other": []byte("theirs")})
			}
			return bumpSequence(ctx, head, headFS)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || heads[0] == heads[1] || res.Parent.String() != heads[1] {
		t.Fatalf("result = %+v, built on %v; want a second attempt on the new head", res, heads)
	}
	fsys, _ := r.FS(res.Commit)
	if n, _ := readSequence(fsys, appLock); n != 3 {
		t.Fatalf("sequence = %d, want 3 (renumbered on the new head)", n)
	}
	if b, _ := fs.ReadFile(fsys, "other"); string(b) != "theirs" {
		t.Fatalf("the other locker's change was lost: %q", b)
	}
}

func TestCommitLocksGivesUpWithErrConflict(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.New(t)
	url, _ := srv.CreateRepo("cfg.git")
	srv.Commit("cfg.git", "seed", map[string][]byte{"x": []byte("0")})
	r, err := gitsource.Clone(ctx, url, "", gitsource.CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{
		MaxAttempts: 3,
		Backoff:     gitsource.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond},
		Build: func(ctx context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
			n++
			srv.Commit("cfg.git", "racer", map[string][]byte{"x": fmt.Appendf(nil, "%d", n)})
			return bumpSequence(ctx, head, headFS)
		},
	})
	if !errors.Is(err, gitsource.ErrConflict) || res.Attempts != 3 || res.Committed {
		t.Fatalf("err = %v, result %+v; want ErrConflict after 3 attempts", err, res)
	}
	if !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("error %q does not say how often it tried", err)
	}
}

func TestCommitLocksStopsWhenContextIsCancelled(t *testing.T) {
	srv := gitserver.New(t)
	url, _ := srv.CreateRepo("cfg.git")
	srv.Commit("cfg.git", "seed", map[string][]byte{"x": []byte("0")})
	r, err := gitsource.Clone(context.Background(), url, "", gitsource.CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{
		MaxAttempts: 100,
		Backoff:     gitsource.Backoff{Initial: time.Hour, Max: time.Hour},
		Build: func(ctx context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
			srv.Commit("cfg.git", "racer", map[string][]byte{"x": []byte(head.String())})
			cancel()
			return bumpSequence(ctx, head, headFS)
		},
	})
	if !errors.Is(err, context.Canceled) || res.Attempts != 1 {
		t.Fatalf("err = %v after %d attempts, want context.Canceled after 1", err, res.Attempts)
	}
}

func TestCommitLocksPushesToALocalPathRemote(t *testing.T) {
	ctx := context.Background()
	origin := newLocalRepo(t, true)
	seedRepo := newLocalRepo(t, false)
	seedRepo.commit("seed", map[string]string{"styrmin.cue": "x: 1\n"})
	seedRepo.git("push", "--quiet", origin.dir, "main")

	r, err := gitsource.Clone(ctx, origin.dir, t.TempDir(), gitsource.CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: bumpSequence})
	if err != nil {
		t.Fatal(err)
	}
	if got := origin.git("rev-parse", "main"); got != res.Commit.String() {
		t.Fatalf("origin main = %s, want %s", got, res.Commit)
	}
	origin.git("fsck", "--strict", "--no-progress")
}

// TestCommitWithAWholeSubject pins the message of a commit that is not a
// lock (Change.Subject): the subject as given, then the trailers.
func TestCommitWithAWholeSubject(t *testing.T) {
	ctx := context.Background()
	lr := newLocalRepo(t, true)
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{
			Files:    map[string][]byte{"clusters/c/environments/e/deployments/app.cue": []byte("appVersion: \"1.0.1\"\n")},
			Subject:  "styrmin: upgrade c/e/app",
			Summary:  "unused",
			Trailers: []gitsource.Trailer{{Key: "Styrmin-Upgrade", Value: "c/e/app"}},
		}, nil
	}})
	if err != nil || !res.Committed {
		t.Fatalf("result = %+v, %v", res, err)
	}
	msg, err := r.Message(res.Commit)
	if err != nil {
		t.Fatal(err)
	}
	if want := "styrmin: upgrade c/e/app\n\nStyrmin-Upgrade: c/e/app\n"; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	_, err = r.CommitLocks(ctx, gitsource.CommitRequest{Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{Files: map[string][]byte{"x": []byte("y")}, Subject: "two\nlines"}, nil
	}})
	if err == nil {
		t.Error("a subject spanning lines was accepted")
	}
}

// TestCommitLocksStoresAChangeAsOnePack: a lock of many lockfiles (two
// chained commits) adds one pack and no loose object to a repository on
// disk (bare: a checkout's index update stores its own copies), which
// git reads back and finds sound.
func TestCommitLocksStoresAChangeAsOnePack(t *testing.T) {
	lr := newLocalRepo(t, true)
	loose := func() int {
		n := 0
		_ = filepath.WalkDir(filepath.Join(lr.dir, "objects"), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && len(filepath.Base(filepath.Dir(p))) == 2 {
				n++
			}
			return nil
		})
		return n
	}
	packs := func() []string {
		m, _ := filepath.Glob(filepath.Join(lr.dir, "objects", "pack", "*.pack"))
		return m
	}
	looseBefore, packsBefore := loose(), len(packs())
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	change := func(n, seq int) gitsource.Change {
		files := map[string][]byte{}
		locks := map[string]int{}
		for i := range n {
			files[fmt.Sprintf("locks/c/e%d/app%03d.lock.yaml", i%7, i)] = fmt.Appendf(nil, "sequence: %d\n", seq)
			locks[fmt.Sprintf("c/e%d/app%03d", i%7, i)] = seq
		}
		return gitsource.Change{Files: files, Locks: locks}
	}
	res, err := r.CommitLocks(context.Background(), gitsource.CommitRequest{Chain: func(context.Context, gitsource.Hash, fs.FS) ([]gitsource.Change, error) {
		return []gitsource.Change{change(300, 1), change(300, 2)}, nil
	}})
	if err != nil || len(res.Commits) != 2 {
		t.Fatalf("%+v, %v", res, err)
	}
	if got := loose(); got != looseBefore {
		t.Errorf("the lock wrote %d loose objects", got-looseBefore)
	}
	if got := len(packs()); got != packsBefore+1 {
		t.Errorf("the lock added %d packs, want one", got-packsBefore)
	}
	if got := lr.git("show", "main:locks/c/e3/app010.lock.yaml"); got != "sequence: 2" {
		t.Errorf("git reads %q", got)
	}
	if got := lr.git("show", "main~1:locks/c/e3/app010.lock.yaml"); got != "sequence: 1" {
		t.Errorf("git reads %q in the first commit", got)
	}
	lr.git("fsck", "--strict", "--no-progress")
}

// TestCommitLocksLocalHonoursGitsLockOfTheBranch: go-git moves a ref in
// place, without git's lock file, so a `git commit` or `git pull` on the
// same branch at the same moment could rename its lock over the ref
// after go-git compared it, leaving the lock commit reported made on no
// branch. A local commit now takes git's lock of the branch
// (refs/heads/<branch>.lock) as git does: one there already (another git
// at work, or one that crashed) is ErrBranchLocked naming the file, the
// branch unmoved; the lock is gone after a commit.
func TestCommitLocksLocalHonoursGitsLockOfTheBranch(t *testing.T) {
	ctx := context.Background()
	lr := newLocalRepo(t, false)
	base := lr.commit("config", map[string]string{"styrmin.cue": "x: 1\n"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req := gitsource.CommitRequest{MaxAttempts: 1, Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{Files: map[string][]byte{appLock: []byte("sequence: 1\n")}, Locks: map[string]int{"c/e/app": 1}}, nil
	}}
	lock := filepath.Join(lr.dir, ".git", "refs", "heads", "main.lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = r.CommitLocks(ctx, req)
	if !errors.Is(err, gitsource.ErrBranchLocked) || !strings.Contains(err.Error(), "refs/heads/main.lock exists in the repository's git directory") {
		t.Fatalf("a commit while git holds the branch's lock: %v; want ErrBranchLocked naming the lock", err)
	}
	if head := lr.git("rev-parse", "HEAD"); head != base {
		t.Fatalf("the branch moved to %s while git held its lock", head)
	}
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	res, err := r.CommitLocks(ctx, req)
	if err != nil || !res.Committed {
		t.Fatalf("a commit once the lock is gone: %+v, %v", res, err)
	}
	if head := lr.git("rev-parse", "HEAD"); head != res.Commit.String() {
		t.Fatalf("HEAD = %s, want %s", head, res.Commit)
	}
	if _, err := os.Stat(lock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the branch's lock after the commit: %v; want it removed", err)
	}
}

// TestCommitLocksLocalHonoursGitsLockOfTheIndex: go-git writes the index
// in place, without git's lock file, so a `git add` or an editor's `git
// status` at the same moment renamed its own index over the lock commit's
// entries (git then showed the lockfile reverted, staged, for the next
// commit to take), and a lock killed during the write left a truncated
// index. A local commit now takes git's lock of the index
// (<gitdir>/index.lock) before it checks the paths: one there already is
// ErrIndexLocked naming the file, the branch unmoved and the other's lock
// left alone; once it is gone the commit replaces the index by a rename
// (a link to the old index keeps the old one whole), staging a deletion
// too, and `git status` is clean.
func TestCommitLocksLocalHonoursGitsLockOfTheIndex(t *testing.T) {
	ctx := context.Background()
	lr := newLocalRepo(t, false)
	base := lr.commit("config", map[string]string{"styrmin.cue": "x: 1\n", "locks/c/e/old.lock.yaml": "sequence: 1\n"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req := gitsource.CommitRequest{MaxAttempts: 1, Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{
			Files: map[string][]byte{appLock: []byte("sequence: 1\n"), "locks/c/e/old.lock.yaml": nil},
			Locks: map[string]int{"c/e/app": 1, "c/e/old": 2},
		}, nil
	}}
	lock := filepath.Join(lr.dir, ".git", "index.lock")
	if err := os.WriteFile(lock, []byte("another git's"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = r.CommitLocks(ctx, req)
	if !errors.Is(err, gitsource.ErrIndexLocked) || !strings.Contains(err.Error(), "index.lock exists in the worktree's git directory") {
		t.Fatalf("a commit while git holds the index's lock: %v; want ErrIndexLocked naming the lock", err)
	}
	if head := lr.git("rev-parse", "HEAD"); head != base {
		t.Fatalf("the branch moved to %s while git held the index's lock", head)
	}
	if b, err := os.ReadFile(lock); err != nil || string(b) != "another git's" {
		t.Fatalf("the other git's lock after the refused commit: %q, %v; want it left as it was", b, err)
	}
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(lr.dir, ".git", "index")
	before, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(t.TempDir(), "index")
	if err := os.Link(idx, kept); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	res, err := r.CommitLocks(ctx, req)
	if err != nil || !res.Committed {
		t.Fatalf("a commit once the lock is gone: %+v, %v", res, err)
	}
	if head := lr.git("rev-parse", "HEAD"); head != res.Commit.String() {
		t.Fatalf("HEAD = %s, want %s", head, res.Commit)
	}
	if st := lr.git("status", "--porcelain"); st != "" {
		t.Errorf("git status after the commit:\n%s", st)
	}
	if _, err := os.Stat(lock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the index's lock after the commit: %v; want it gone", err)
	}
	if after, err := os.ReadFile(kept); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the old index was written in place (%v): a reader, or a kill, could meet part of one", err)
	}
}

// TestCommitLocksLocalReplacesAWorktreeLockfileByARename: a local commit
// wrote each changed lockfile of the worktree in place (truncated, then
// written), so an editor or a build reading it at that moment met part of
// one, and a lock killed during the write left a lockfile cut short
// beside the commit that holds it all. Each is now written beside it and
// renamed over it: a link to the old file keeps the old content whole,
// the new one keeps the file's mode, nothing is left beside it, and `git
// status` is clean.
func TestCommitLocksLocalReplacesAWorktreeLockfileByARename(t *testing.T) {
	ctx := context.Background()
	lr := newLocalRepo(t, false)
	lr.commit("config", map[string]string{"styrmin.cue": "x: 1\n", appLock: "sequence: 1\n"})
	r, err := gitsource.Open(lr.dir, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(lr.dir, filepath.FromSlash(appLock))
	kept := filepath.Join(t.TempDir(), "app.lock.yaml")
	if err := os.Link(file, kept); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	res, err := r.CommitLocks(ctx, gitsource.CommitRequest{MaxAttempts: 1, Build: func(context.Context, gitsource.Hash, fs.FS) (gitsource.Change, error) {
		return gitsource.Change{Files: map[string][]byte{appLock: []byte("sequence: 2\n")}, Locks: map[string]int{"c/e/app": 2}}, nil
	}})
	if err != nil || !res.Committed {
		t.Fatalf("commit: %+v, %v", res, err)
	}
	if b, err := os.ReadFile(kept); err != nil || string(b) != "sequence: 1\n" {
		t.Errorf("a link to the old lockfile reads %q, %v; want the old content whole (the file was written in place)", b, err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "sequence: 2\n" {
		t.Errorf("the lockfile reads %q, %v; want the new content", b, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm()&0o644 != 0o644 || fi.Mode().Perm()&0o111 != 0 {
		t.Errorf("the lockfile's mode: %v, %v; want rw-r--r-- as git writes it", fi.Mode(), err)
	}
	entries, err := os.ReadDir(filepath.Dir(file))
	if err != nil || len(entries) != 1 {
		t.Errorf("the lockfile's folder holds %v (%v); want the lockfile alone", entries, err)
	}
	if st := lr.git("status", "--porcelain"); st != "" {
		t.Errorf("git status after the commit:\n%s", st)
	}
}
