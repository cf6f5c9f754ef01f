package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadHeadChoosesTheWorkingTreeOrARevision pins the one way plan,
// lock and explain choose their head, and the commit new instances record.
func TestLoadHeadChoosesTheWorkingTreeOrARevision(t *testing.T) {
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
	dir := lockedGitRepo(t)
	planGit(t, dir, "checkout", "-q", "--orphan", "unrelated")
	planGit(t, dir, "commit", "-q", "-m", "unrelated history")
	planGit(t, dir, "branch", "-q", "--set-upstream-to", "origin/main")
	_, code, err := styrminctl(t, "--repo", dir, "plan")
	if code != 1 || err == nil || err.Error() != "HEAD and its upstream origin/main have no common commit: pass --base" {
		t.Fatalf("exit %d, err %v", code, err)
	}
}
