package e2e

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// inFolder is fsys below dir of a larger repository that also holds a
// file of its own.
func inFolder(t testing.TB, fsys fs.FS, dir string) fs.FS {
	t.Helper()
	out := fstest.MapFS{"README.md": {Data: []byte("a larger repository\n")}}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		out[dir+"/"+p] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMonorepoFolderIsLockedAndAppliedLikeARepository keeps the
// desired-state repository in deploy/ of a larger one: `lock --push` run
// in the folder writes deploy/locks/, and the agent with --path=deploy
// applies it and the next change.
func TestMonorepoFolderIsLockedAndAppliedLikeARepository(t *testing.T) {
	t.Parallel()
	ctl, bin := buildBinaries(t)
	w := agenttest.Start(t, agenttest.Options{Repo: inFolder(t, examples.Repo(), "deploy"), RepoName: repoName, Token: gitToken, SecretName: repoSecret})
	e := &env{cluster: w.Cluster, c: w.Client, git: w.Git, url: w.URL, ctl: ctl, bin: bin, kubeconfig: w.Kubeconfig}
	// A checkout with files: a worktree of the (bare) clone.
	clone := filepath.Join(t.TempDir(), "work")
	if out, err := exec.Command("git", "-C", e.newClone(t), "worktree", "add", "-q", "--detach", clone, "main").CombinedOutput(); err != nil {
		t.Fatalf("git worktree add: %v\n%s", err, out)
	}
	lock := func() string {
		t.Helper()
		cmd := exec.Command(e.ctl, "--repo", filepath.Join(clone, "deploy"), "lock", "--push", "--branch", "main")
		cmd.Env = append(os.Environ(), "STYRMIN_GIT_TOKEN="+gitToken)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("lock --push in deploy/: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := lock(); strings.Count(out, "locked local/") != 4 {
		t.Fatalf("first lock:\n%s", out)
	}
	e.startAgent(t, "--path=deploy")
	for _, d := range allDeployments {
		requirePhase(t, e.waitTask(t, d.ns, d.name, 1), v1alpha1.TaskSucceeded)
	}

	e.git.Commit(repoName, "hub: 3 workers", map[string][]byte{"deploy/" + devHubFile: hubWithWorkers(t, 3)[devHubFile]})
	if out := lock(); !strings.Contains(out, "locked local/dev/hub=2 ") {
		t.Fatalf("second lock:\n%s", out)
	}
	requirePhase(t, e.waitTask(t, "dev-hub", "hub", 2), v1alpha1.TaskSucceeded)
	if sd := e.deployment(t, "dev-hub"); sd.Status.ActiveSequence != 2 || !strings.Contains(string(sd.Spec.Values.Raw), `"worker":{"replicas":3}`) {
		t.Errorf("dev/hub: active %d, values %s; want 2 with 3 workers", sd.Status.ActiveSequence, sd.Spec.Values.Raw)
	}
}
