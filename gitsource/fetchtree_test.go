package gitsource_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// bigBranch adds branch big to repository name of srv: a commit after
// main's head holding a file of size zero bytes, which git packs to a
// thousandth of that. It returns the commit.
func bigBranch(t *testing.T, srv *gitserver.Server, name string, size int64) string {
	t.Helper()
	dir := srv.Dir(name)
	// Compressed fast, and packed once so that each fetch reuses it.
	cmd := exec.Command("sh", "-c", fmt.Sprintf("head -c %d /dev/zero | git -c core.looseCompression=1 hash-object -w --stdin", size))
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("writing the large blob: %v", err)
	}
	blob := strings.TrimSpace(string(out))
	// The file beside the folders of main's tree.
	ls := srv.Git(dir, "ls-tree", "main^{tree}")
	mk := exec.Command("git", "mktree")
	mk.Dir = dir
	mk.Stdin = strings.NewReader(ls + "\n100644 blob " + blob + "\tzeros.bin\n")
	out, err = mk.Output()
	if err != nil {
		t.Fatalf("mktree: %v", err)
	}
	commit := srv.Git(dir, "commit-tree", strings.TrimSpace(string(out)), "-p", "main", "-m", "a large file")
	srv.Git(dir, "update-ref", "refs/heads/big", commit)
	srv.Git(dir, "-c", "pack.compression=1", "repack", "-adq")
	return commit
}

// allocated is how many bytes f allocated on the heap, in all.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestAFetchHoldsAtMostItsLimitInMemory: a driver repository with a
// branch holding 256 MiB of zeros (a pack of a few hundred KB) is
// fetched within the fetch limit. The commit a branch points at comes
// alone (depth 1), without the other branch; the large commit, and an
// older commit (which needs every branch), are refused naming the
// repository and the limit, having allocated a small part of the file.
// Before the limit every fetch inflated the whole file into memory.
func TestAFetchHoldsAtMostItsLimitInMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 256 MiB blob")
	}
	srv := gitserver.New(t)
	older := srv.Commit("drivers", "webapp 1.0.0", map[string][]byte{"webapp/driver.cue": []byte("name: \"webapp\"\n")})
	tip := srv.Commit("drivers", "webapp 1.1.0", map[string][]byte{"webapp/driver.cue": []byte("name: \"webapp\"\nversion: \"1.1.0\"\n")})
	big := bigBranch(t, srv, "drivers", 256<<20)
	url := srv.RepoURL("drivers")
	ctx := context.Background()
	const most = 16 << 20 // what a refused or a small fetch may allocate in all

	var fsys fs.FS
	var err error
	n := allocated(func() { fsys, err = gitsource.FetchCommit(ctx, url, mustHash(t, tip), gitsource.Auth{}) })
	t.Logf("the commit main points at: %d KiB allocated", n>>10)
	if err != nil {
		t.Fatalf("FetchCommit of main's head: %v", err)
	}
	if b, err := fs.ReadFile(fsys, "webapp/driver.cue"); err != nil || !strings.Contains(string(b), "1.1.0") {
		t.Fatalf("the driver at main's head: %q, %v", b, err)
	}
	if _, err := fs.Stat(fsys, "zeros.bin"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("main's tree holds the big branch's file: %v", err)
	}
	if n > most {
		t.Errorf("fetching the commit main points at allocated %d MiB: the big branch was fetched", n>>20)
	}

	n = allocated(func() { _, _, err = gitsource.FetchTree(ctx, url, "main", "webapp", gitsource.Auth{}) })
	t.Logf("branch main: %d KiB allocated", n>>10)
	if err != nil || n > most {
		t.Errorf("FetchTree of main: %v, %d MiB allocated", err, n>>20)
	}

	for name, commit := range map[string]string{"the big branch's head": big, "an older commit of main": older} {
		n = allocated(func() { _, err = gitsource.FetchCommit(ctx, url, mustHash(t, commit), gitsource.Auth{}) })
		t.Logf("%s: %d KiB allocated: %v", name, n>>10, err)
		var limit *gitsource.FetchLimitError
		if !errors.As(err, &limit) {
			t.Fatalf("FetchCommit of %s: %v, want a FetchLimitError", name, err)
		}
		if msg := err.Error(); !strings.Contains(msg, url) || !strings.Contains(msg, "32 MiB") {
			t.Errorf("the error names neither the repository nor the limit: %s", msg)
		}
		if n > most {
			t.Errorf("refusing %s allocated %d MiB", name, n>>20)
		}
	}

	// A limit below the driver's own size refuses even the tip.
	_, err = gitsource.FetchCommitWithin(ctx, url, mustHash(t, tip), gitsource.Auth{}, 64)
	if limit, ok := errors.AsType[*gitsource.FetchLimitError](err); !ok || limit.Limit != 64 {
		t.Fatalf("a fetch over a limit of 64 bytes: %v", err)
	}
}

func mustHash(t *testing.T, s string) gitsource.Hash {
	t.Helper()
	h, err := gitsource.ParseHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestFetchReadsBranchesTagsAndOlderCommits: a branch, an annotated tag,
// the commit the tag points at (each fetched alone) and an older commit
// (from every ref, with the deltas git packs the versions of a file as)
// read as git has them, and the tree of a commit holds no file of a later
// one.
func TestFetchReadsBranchesTagsAndOlderCommits(t *testing.T) {
	srv := gitserver.New(t)
	text := strings.Repeat("a line of a chart template\n", 300)
	var commits []string
	for i := range 5 {
		text = strings.Replace(text, "a line", fmt.Sprintf("line %d", i), 2)
		files := map[string][]byte{"webapp/chart/templates/deployment.yaml": []byte(text)}
		if i == 4 {
			files["webapp/later.txt"] = []byte("later")
		}
		commits = append(commits, srv.Commit("drivers", fmt.Sprintf("version %d", i), files))
	}
	dir := srv.Dir("drivers")
	srv.Git(dir, "tag", "-a", "-m", "release", "v1.1.0", commits[2])
	want := func(commit string) string {
		return srv.Git(dir, "show", commit+":webapp/chart/templates/deployment.yaml") + "\n"
	}
	url := srv.RepoURL("drivers")
	ctx := context.Background()
	for _, tc := range []struct{ rev, commit string }{
		{"main", commits[4]},
		{"v1.1.0", commits[2]},
		{commits[2], commits[2]},
		{commits[1], commits[1]},
	} {
		fsys, got, err := gitsource.FetchTree(ctx, url, tc.rev, "webapp", gitsource.Auth{})
		if err != nil || got.String() != tc.commit {
			t.Fatalf("FetchTree %s = %s, %v; want %s", tc.rev, got, err, tc.commit)
		}
		if b, err := fs.ReadFile(fsys, "chart/templates/deployment.yaml"); err != nil || string(b) != want(tc.commit) {
			t.Fatalf("FetchTree %s: the template is not the commit's (%v)", tc.rev, err)
		}
		if _, err := fs.Stat(fsys, "later.txt"); (tc.commit == commits[4]) != (err == nil) {
			t.Fatalf("FetchTree %s: later.txt: %v", tc.rev, err)
		}
	}
	if _, err := gitsource.FetchCommit(ctx, url, mustHash(t, strings.Repeat("e", 40)), gitsource.Auth{}); !errors.Is(err, gitsource.ErrCommitNotFound) {
		t.Fatalf("a commit the remote does not have: %v", err)
	}
}
