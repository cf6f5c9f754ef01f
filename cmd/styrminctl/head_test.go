package main

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoadHeadChoosesTheWorkingTreeOrARevision pins the one way plan,
// lock and explain choose their head, and the commit new instances record.
func TestLoadHeadChoosesTheWorkingTreeOrARevision(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "deploy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	read := func(h head) string {
		t.Helper()
		b, err := fs.ReadFile(h.fsys, "styrmin.cue")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// Outside git: the folder, no commit.
	writeRepoFile(t, dir, "styrmin.cue", "deletionThreshold: 1\n")
	h, err := loadHead(dir, "", openRepo(dir))
	if err != nil || h.name != "working tree" || h.commit != "" || read(h) != "deletionThreshold: 1\n" {
		t.Fatalf("outside git: %+v, %v", h, err)
	}

	planGit(t, root, "init", "-q", "-b", "main")
	planGit(t, root, "add", ".")
	planGit(t, root, "commit", "-q", "-m", "one")
	first := planGit(t, root, "rev-parse", "HEAD")
	writeRepoFile(t, dir, "styrmin.cue", "deletionThreshold: 2\n")
	planGit(t, root, "commit", "-q", "-am", "two")
	second := planGit(t, root, "rev-parse", "HEAD")
	writeRepoFile(t, dir, "styrmin.cue", "deletionThreshold: 3\n")

	repo := openRepo(dir)
	if repo == nil {
		t.Fatal("openRepo: nil inside a git repository")
	}
	// A working tree with uncommitted configuration edits records no
	// commit: HEAD's configuration would give other instances.
	h, err = loadHead(dir, "", repo)
	if err != nil || h.name != "working tree" || h.commit != "" || !h.edited || read(h) != "deletionThreshold: 3\n" {
		t.Errorf("edited working tree: %+v, %v; want no commit", h, err)
	}
	// A file outside the configuration (a README) changes nothing; the
	// working tree is HEAD's configuration.
	writeRepoFile(t, dir, "styrmin.cue", "deletionThreshold: 2\n")
	writeRepoFile(t, dir, "README.md", "notes\n")
	h, err = loadHead(dir, "", repo)
	if err != nil || h.commit != second || h.edited {
		t.Errorf("clean working tree: %+v, %v; want commit %s", h, err, second)
	}
	// A revision: its tree at the same folder, named with its short hash.
	h, err = loadHead(dir, "HEAD~1", repo)
	if err != nil || h.name != "HEAD~1 ("+first[:12]+")" || h.commit != first || read(h) != "deletionThreshold: 1\n" {
		t.Errorf("HEAD~1: %+v, %v; want commit %s", h, err, first)
	}
	if _, err := loadHead(dir, "nosuch", repo); err == nil || !strings.Contains(err.Error(), `resolve "nosuch"`) {
		t.Errorf("unknown revision: %v", err)
	}
	// A detached HEAD (a CI checkout) records the commit it is at.
	planGit(t, root, "checkout", "-q", "--detach", "HEAD")
	if h, err := loadHead(dir, "", openRepo(dir)); err != nil || h.commit != second {
		t.Errorf("detached: %+v, %v; want commit %s", h, err, second)
	}
}

func TestPlanNamesTheWayOutWhenTheUpstreamSharesNoCommit(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	planGit(t, dir, "checkout", "-q", "--orphan", "unrelated")
	planGit(t, dir, "commit", "-q", "-m", "unrelated history")
	planGit(t, dir, "branch", "-q", "--set-upstream-to", "origin/main")
	_, code, err := styrminctl(t, "--repo", dir, "plan")
	if code != 1 || err == nil || err.Error() != "HEAD and its upstream origin/main have no common commit: pass --base" {
		t.Fatalf("exit %d, err %v", code, err)
	}
}

// The workspace loads while git is asked which commit the working tree
// is: when git fails (here HEAD's tree is missing from the store), its
// error is the command's, and a driver source being fetched meanwhile
// (from a server that never answers) is given up rather than waited for.
func TestAGitErrorEndsTheLockWithoutWaitingForDriverSources(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	stalled := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stalled:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stalled)

	repo := exampleRepo(t)
	settings := "drivers: [{name: \"webapp\", version: \"1.2.0\", url: \"" + srv.URL + "/drivers.git\", ref: \"main\", path: \"webapp\"}]\n"
	writeRepoFile(t, repo, "styrmin.cue", settings)
	planGit(t, repo, "init", "-q", "-b", "main")
	planGit(t, repo, "add", ".")
	planGit(t, repo, "commit", "-q", "-m", "configuration")
	tree := planGit(t, repo, "rev-parse", "HEAD^{tree}")
	if err := os.Remove(filepath.Join(repo, ".git", "objects", tree[:2], tree[2:])); err != nil {
		t.Fatal(err)
	}

	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, _, err := styrminctl(t, "--repo", repo, "lock")
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		if r.err == nil || !strings.Contains(r.err.Error(), "object not found") || strings.Contains(r.err.Error(), "drivers[0]") {
			t.Fatalf("lock: %v\n%s\nwant git's error about the missing tree, not the driver source's", r.err, r.out)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the lock still waits for the driver source a minute after git failed")
	}
}

// TestAnEditedYAMLSettingsFileIsAnEditedWorkingTree: a repository whose
// settings are styrmin.yaml (not .cue) had edits to it taken for HEAD's
// configuration: the lock recorded HEAD as the instances' source commit
// though they came from the edits, and `lock --commit` did not say the
// edits were not locked.
func TestAnEditedYAMLSettingsFileIsAnEditedWorkingTree(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "deploy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRepoFile(t, dir, "styrmin.yaml", "deletionThreshold: 1\n")
	planGit(t, root, "init", "-q", "-b", "main")
	planGit(t, root, "add", ".")
	planGit(t, root, "commit", "-q", "-m", "one")
	head := planGit(t, root, "rev-parse", "HEAD")
	h, err := loadHead(dir, "", openRepo(dir))
	if err != nil || h.commit != head || h.edited {
		t.Fatalf("clean working tree: %+v, %v; want commit %s", h, err, head)
	}
	writeRepoFile(t, dir, "styrmin.yaml", "deletionThreshold: 2\n")
	h, err = loadHead(dir, "", openRepo(dir))
	if err != nil || h.commit != "" || !h.edited {
		t.Errorf("styrmin.yaml edited: %+v, %v; want an edited working tree, no commit", h, err)
	}
}
