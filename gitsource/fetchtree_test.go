package gitsource_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
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
// alone (depth 1), without the other branch, and so does an older commit
// of main, by its hash or, from a server that refuses that, from main's
// history alone; the large commit is refused naming the repository and
// the limit, having allocated a small part of the file. Before the limit
// every fetch inflated the whole file into memory; before the history of
// main alone, the older commit needed every branch, and was refused.
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

	for _, byHash := range []bool{false, true} {
		srv.Git(srv.Dir("drivers"), "config", "uploadpack.allowReachableSHA1InWant", fmt.Sprint(byHash))
		n = allocated(func() { fsys, err = gitsource.FetchCommit(ctx, url, mustHash(t, older), gitsource.Auth{}) })
		t.Logf("an older commit of main, by hash %v: %d KiB allocated", byHash, n>>10)
		if err != nil {
			t.Fatalf("FetchCommit of an older commit of main (by hash %v): %v", byHash, err)
		}
		if b, err := fs.ReadFile(fsys, "webapp/driver.cue"); err != nil || strings.Contains(string(b), "1.1.0") {
			t.Fatalf("the driver at the older commit: %q, %v", b, err)
		}
		if n > most {
			t.Errorf("fetching an older commit of main (by hash %v) allocated %d MiB", byHash, n>>20)
		}
	}

	n = allocated(func() { _, err = gitsource.FetchCommit(ctx, url, mustHash(t, big), gitsource.Auth{}) })
	t.Logf("the big branch's head: %d KiB allocated: %v", n>>10, err)
	var limit *gitsource.FetchLimitError
	if !errors.As(err, &limit) || limit.History != "" {
		t.Fatalf("FetchCommit of the big branch's head: %v, want a FetchLimitError of the commit alone", err)
	}
	if msg := err.Error(); !strings.Contains(msg, url) || !strings.Contains(msg, "32 MiB") {
		t.Errorf("the error names neither the repository nor the limit: %s", msg)
	}
	if n > most {
		t.Errorf("refusing the big branch's head allocated %d MiB", n>>20)
	}

	// A limit below the driver's own size refuses even the tip.
	_, err = gitsource.FetchCommitWithin(ctx, url, mustHash(t, tip), gitsource.Auth{}, 64)
	if limit, ok := errors.AsType[*gitsource.FetchLimitError](err); !ok || limit.Limit != 64 {
		t.Fatalf("a fetch over a limit of 64 bytes: %v", err)
	}
}

// TestAnOlderCommitBehindFortyMiBOfHistoryIsFetchedByItsHash: the locked
// commit of a driver repository whose main has since gained 40 commits
// of a 1 MiB chart .tgz each (40 MiB of history, over the 32 MiB limit)
// is fetched alone by its hash when the server sends commits by hash;
// when it does not, the refusal says the history up to the commit is
// over the limit and what would fetch it alone. Before, the commit was
// looked for in every branch's whole history, and refused.
func TestAnOlderCommitBehindFortyMiBOfHistoryIsFetchedByItsHash(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 40 MiB of history")
	}
	srv := gitserver.New(t)
	locked := srv.Commit("drivers", "webapp 1.0.0", map[string][]byte{"webapp/driver.cue": []byte("name: \"webapp\"\n")})
	dir := srv.Dir("drivers")
	// 40 commits each rewriting the chart with 1 MiB that neither
	// compresses nor deltas, written in the bare repository directly.
	script := `for i in $(seq 40); do
		blob=$(head -c 1048576 /dev/urandom | git hash-object -w --stdin)
		tree=$( (git ls-tree main^{tree} | grep -v '	chart.tgz$'; printf '100644 blob %s\tchart.tgz\n' "$blob") | git mktree)
		git update-ref refs/heads/main "$(git commit-tree "$tree" -p main -m "chart $i")"
	done`
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@localhost", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@localhost")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writing the history: %v\n%s", err, out)
	}
	url := srv.RepoURL("drivers")
	ctx := context.Background()

	srv.Git(dir, "config", "uploadpack.allowReachableSHA1InWant", "true")
	var fsys fs.FS
	var err error
	n := allocated(func() { fsys, err = gitsource.FetchCommit(ctx, url, mustHash(t, locked), gitsource.Auth{}) })
	t.Logf("the locked commit by its hash: %d KiB allocated", n>>10)
	if err != nil {
		t.Fatalf("FetchCommit of the locked commit: %v", err)
	}
	if _, err := fs.ReadFile(fsys, "webapp/driver.cue"); err != nil {
		t.Fatalf("the locked commit's driver: %v", err)
	}
	if n > 8<<20 {
		t.Errorf("fetching the locked commit by its hash allocated %d MiB: its history was fetched", n>>20)
	}

	srv.Git(dir, "config", "uploadpack.allowReachableSHA1InWant", "false")
	_, err = gitsource.FetchCommit(ctx, url, mustHash(t, locked), gitsource.Auth{})
	var limit *gitsource.FetchLimitError
	if !errors.As(err, &limit) || limit.History == "" {
		t.Fatalf("the locked commit from a server that refuses a hash: %v, want a FetchLimitError of its history", err)
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{url, "32 MiB", "history up to the commit exceeds", "allowReachableSHA1InWant", "a tag on the commit"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q: %s", want, msg)
		}
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

// TestACommitOnlyATagReachesIsFoundInTheTagsHistory: from a server that
// does not send a commit by its hash, a commit behind a tag and on no
// branch (main was reset before it) is still fetched, from the tags.
func TestACommitOnlyATagReachesIsFoundInTheTagsHistory(t *testing.T) {
	srv := gitserver.New(t)
	first := srv.Commit("drivers", "webapp 1.0.0", map[string][]byte{"webapp/driver.cue": []byte("v1\n")})
	behind := srv.Commit("drivers", "webapp 1.1.0", map[string][]byte{"webapp/driver.cue": []byte("v1.1\n")})
	tagged := srv.Commit("drivers", "webapp 1.2.0", map[string][]byte{"webapp/driver.cue": []byte("v1.2\n")})
	srv.Git(srv.Dir("drivers"), "tag", "v1.2.0", tagged)
	srv.Reset("drivers", "main", first)
	fsys, err := gitsource.FetchCommit(context.Background(), srv.RepoURL("drivers"), mustHash(t, behind), gitsource.Auth{})
	if err != nil {
		t.Fatalf("FetchCommit of a commit only a tag reaches: %v", err)
	}
	if b, err := fs.ReadFile(fsys, "webapp/driver.cue"); err != nil || string(b) != "v1.1\n" {
		t.Fatalf("the commit's driver: %q, %v", b, err)
	}
}
