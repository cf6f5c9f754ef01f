package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/resolver"
)

// moveAndLink moves the repository folder rel to target (both relative to
// dir) and puts a symbolic link to it in its place.
func moveAndLink(t *testing.T, dir, rel, target string) {
	t.Helper()
	from, to := filepath.Join(dir, filepath.FromSlash(rel)), filepath.Join(dir, filepath.FromSlash(target))
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
	link, err := filepath.Rel(filepath.Dir(from), to)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(link, from); err != nil {
		t.Fatal(err)
	}
}

// TestASymlinkedFolderIsRefusedNamingItAndNothingIsLocked: a cluster,
// environment or deployments folder, the drivers or a driver folder, or
// the locks folder that is a symbolic link is an error naming it, in the
// working tree and in a committed tree; no lockfile is written (a linked
// environment used to vanish, its deployments tombstoned) and no commit is
// made.
func TestASymlinkedFolderIsRefusedNamingItAndNothingIsLocked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ folder, target string }{
		{"clusters/local", "elsewhere/local"},
		{"clusters/local/environments", "elsewhere/environments"},
		{"clusters/local/environments/dev", "elsewhere/dev"},
		{"clusters/local/environments/dev/deployments", "elsewhere/deployments"},
		{"drivers/webapp", "elsewhere/webapp"},
		{"drivers/webapp/1.1.0", "elsewhere/webapp-1.1.0"},
		{"locks", "elsewhere/locks"},
		{"locks/local", "elsewhere/locks-local"},
	} {
		t.Run(strings.ReplaceAll(tc.folder, "/", "_"), func(t *testing.T) {
			dir := lockedGitRepo(t)
			// A change, so a lock that ignored the link would write.
			writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
			planGit(t, dir, "commit", "-q", "-am", "web 3 replicas")
			moveAndLink(t, dir, tc.folder, tc.target)
			before := planGit(t, dir, "status", "--porcelain", "--untracked-files=all")

			check := func(what string, args ...string) {
				t.Helper()
				out, code, err := styrminctl(t, append([]string{"--repo", dir}, args...)...)
				if code == 0 || err == nil {
					t.Fatalf("%s: exit 0, want a refusal of %s\n%s", what, tc.folder, out)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.folder+": is a symbolic link; symbolic links are refused") {
					t.Errorf("%s: the error does not name %s as a refused symbolic link: %v", what, tc.folder, err)
				}
				if strings.Contains(out, "locked ") || strings.Contains(out, "committed") {
					t.Errorf("%s: something was locked:\n%s", what, out)
				}
				if st := planGit(t, dir, "status", "--porcelain", "--untracked-files=all"); st != before {
					t.Errorf("%s changed the working tree:\n%s\nwas:\n%s", what, st, before)
				}
			}
			check("lock of the working tree", "lock")

			// The link committed: lock --commit reads the committed tree.
			planGit(t, dir, "add", "-A")
			planGit(t, dir, "commit", "-q", "-m", "link "+tc.folder)
			head := planGit(t, dir, "rev-parse", "HEAD")
			before = planGit(t, dir, "status", "--porcelain", "--untracked-files=all")
			check("lock --commit of the committed tree", "lock", "--commit")
			if h := planGit(t, dir, "rev-parse", "HEAD"); h != head {
				t.Errorf("lock --commit committed %s", h)
			}
		})
	}
}

// TestLockWriterRefusesToWriteThroughASymlinkedFolder: a link made after
// the lock read the repository (or one the loader never saw) does not
// lead the writer out of the repository: nothing is written.
func TestLockWriterRefusesToWriteThroughASymlinkedFolder(t *testing.T) {
	t.Parallel()
	root, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "locks")); err != nil {
		t.Fatal(err)
	}
	var changes []resolver.LockChange
	for _, n := range []string{"hub", "web"} {
		id := resolver.ID{Cluster: "local", Environment: "dev", Name: n}
		changes = append(changes, resolver.LockChange{ID: id, Data: []byte(id.String() + "\n")})
	}
	written, err := writeLocks(root, changes)
	if err == nil || !strings.Contains(err.Error(), "locks: is a symbolic link; symbolic links are refused") {
		t.Errorf("writeLocks through a linked locks folder: %v, want a refusal naming locks", err)
	}
	for i, w := range written {
		if w {
			t.Errorf("%s was written", changes[i].Path())
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		t.Errorf("the writer wrote outside the repository: %v", entries)
	}
}
