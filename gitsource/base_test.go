package gitsource_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
)

func openLocal(t *testing.T, path string) *gitsource.Repo {
	t.Helper()
	repo, err := gitsource.Open(path, gitsource.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

func TestSubdirAndTreeAtReadTheFolderOfACommit(t *testing.T) {
	r := newLocalRepo(t, false)
	first := r.commit("first", map[string]string{"deploy/styrmin/styrmin.cue": "a: 1\n", "README": "x\n"})
	r.commit("second", map[string]string{"deploy/styrmin/styrmin.cue": "a: 2\n"})
	// A link to the folder names the same place.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(filepath.Join(r.dir, "deploy", "styrmin"), link); err != nil {
		t.Skip("symlinks not available:", err)
	}
	tests := []struct {
		open, dir, want string
	}{
		{r.dir, r.dir, "."},
		{filepath.Join(r.dir, "deploy"), filepath.Join(r.dir, "deploy", "styrmin"), "deploy/styrmin"},
		{r.dir, link, "deploy/styrmin"},
	}
	for _, tc := range tests {
		repo := openLocal(t, tc.open)
		sub, err := repo.Subdir(tc.dir)
		if err != nil || sub != tc.want {
			t.Errorf("Subdir(%s) = %q, %v; want %q", tc.dir, sub, err, tc.want)
		}
	}

	repo := openLocal(t, r.dir)
	h, err := gitsource.ParseHash(first)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := repo.TreeAt(h, "deploy/styrmin")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := fs.ReadFile(fsys, "styrmin.cue"); err != nil || string(b) != "a: 1\n" {
		t.Errorf("styrmin.cue at the first commit = %q, %v", b, err)
	}
	root, err := repo.TreeAt(h, ".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(root, "README"); err != nil {
		t.Errorf("the root of the first commit: %v", err)
	}
	empty, err := repo.TreeAt(gitsource.Hash{}, "deploy/styrmin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(empty, "styrmin.cue"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the zero commit's tree has styrmin.cue: %v", err)
	}
}

func TestSubdirOfABareRepositoryIsTheRoot(t *testing.T) {
	r := newLocalRepo(t, true)
	sub, err := openLocal(t, r.dir).Subdir(r.dir)
	if err != nil || sub != "." {
		t.Fatalf("Subdir = %q, %v", sub, err)
	}
}

// TestResolveBase pins how a comparison's base is chosen: the revision
// given; else the merge base with the current branch's upstream; else
// HEAD; nothing in a repository without commits.
func TestResolveBase(t *testing.T) {
	empty := newLocalRepo(t, false)
	if rev, err := openLocal(t, empty.dir).ResolveBase(""); err != nil || rev != (gitsource.Revision{}) {
		t.Errorf("without commits: %+v, %v; want the zero Revision", rev, err)
	}

	r := newLocalRepo(t, false)
	base := r.commit("base", map[string]string{"a": "1"})
	short := base[:12]
	// No upstream: HEAD.
	head := r.commit("on main", map[string]string{"a": "2"})
	got, err := openLocal(t, r.dir).ResolveBase("")
	if err != nil || got.Commit.String() != head || got.Name != "HEAD ("+head[:12]+")" {
		t.Errorf("without an upstream: %+v, %v; want HEAD %s", got, err, head)
	}
	// A revision given wins.
	got, err = openLocal(t, r.dir).ResolveBase("HEAD~1")
	if err != nil || got.Commit.String() != base || got.Name != "HEAD~1 ("+short+")" {
		t.Errorf("--base HEAD~1: %+v, %v", got, err)
	}
	if _, err := openLocal(t, r.dir).ResolveBase("nosuch"); err == nil || !strings.Contains(err.Error(), `resolve "nosuch"`) {
		t.Errorf("unknown revision: %v", err)
	}

	// A feature branch tracking a local upstream (branch.<name>.remote
	// "."), both moved on since they forked: the merge base.
	r.git("branch", "upstream", base)
	r.git("checkout", "--quiet", "-b", "feature", "--track", "upstream")
	r.commit("on feature", map[string]string{"b": "1"})
	r.git("checkout", "--quiet", "upstream")
	r.commit("on upstream", map[string]string{"c": "1"})
	r.git("checkout", "--quiet", "feature")
	got, err = openLocal(t, r.dir).ResolveBase("")
	if err != nil || got.Commit.String() != base || got.Name != "merge base with upstream ("+short+")" {
		t.Errorf("with an upstream: %+v, %v; want the merge base %s", got, err, base)
	}

	// A detached HEAD has no upstream: HEAD itself.
	r.git("checkout", "--quiet", "--detach", "HEAD")
	detached := r.git("rev-parse", "HEAD")
	got, err = openLocal(t, r.dir).ResolveBase("")
	if err != nil || got.Commit.String() != detached || !strings.HasPrefix(got.Name, "HEAD (") {
		t.Errorf("detached: %+v, %v", got, err)
	}
}

func TestUpstreamMergeBase(t *testing.T) {
	r := newLocalRepo(t, false)
	base := r.commit("base", map[string]string{"a": "1"})
	origin := newLocalRepo(t, true)
	r.git("remote", "add", "origin", origin.dir)

	// An upstream configured but never fetched counts as none.
	r.git("config", "branch.main.remote", "origin")
	r.git("config", "branch.main.merge", "refs/heads/main")
	if h, up, err := openLocal(t, r.dir).UpstreamMergeBase(); err != nil || up != "" || !h.IsZero() {
		t.Errorf("unfetched upstream: %s %q %v", h, up, err)
	}

	r.git("push", "--quiet", "origin", "main")
	r.commit("ahead", map[string]string{"a": "2"})
	h, up, err := openLocal(t, r.dir).UpstreamMergeBase()
	if err != nil || up != "origin/main" || h.String() != base {
		t.Errorf("= %s %q %v; want %s origin/main", h, up, err, base)
	}

	// An upstream with a history of its own shares no commit.
	r.git("checkout", "--quiet", "--orphan", "other")
	r.commit("unrelated", map[string]string{"z": "1"})
	r.git("config", "branch.other.remote", "origin")
	r.git("config", "branch.other.merge", "refs/heads/main")
	_, _, err = openLocal(t, r.dir).UpstreamMergeBase()
	if !errors.Is(err, gitsource.ErrNoMergeBase) || !strings.Contains(err.Error(), "HEAD and its upstream origin/main have no common commit") {
		t.Errorf("unrelated histories: %v, want ErrNoMergeBase", err)
	}
}
