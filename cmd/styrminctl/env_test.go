package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvCloneAndDelete: a clone is written and locks; a refused clone
// writes nothing; a deleted environment's deployments need the
// allowance the command names; --commit commits.
func TestEnvCloneAndDelete(t *testing.T) {
	t.Parallel()
	dir := upgradeGitRepo(t)
	out := mustRun(t, "--repo", dir, "env", "clone", "local/dev", "preview")
	for _, want := range []string{"wrote clusters/local/environments/preview: 2 deployments (hub, web), a clone of local/dev at ", "its backups go to s3://backups/local/preview", "styrminctl lock"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "clusters/local/environments/preview/deployments/hub.cue")); err != nil {
		t.Fatal(err)
	}
	before := planGit(t, dir, "status", "--porcelain")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"env", "clone", "local/dev", "staging"}, "environment local/staging exists already"},
		{[]string{"env", "clone", "local/dev", "qa", "--from-backup", "latest", "--kubeconfig", filepath.Join(dir, "no-such-kubeconfig")}, "--from-backup latest asks the cluster"},
		{[]string{"env", "clone", "local/dev", "qa", "--namespace-prefix", "staging"}, `deployment hub the namespace "staging-hub" of local/staging/hub`},
		{[]string{"env", "delete", "local/prod"}, `no environment "prod"`},
	} {
		out, code, err := styrminctl(t, append([]string{"--repo", dir}, tc.args...)...)
		if code == 0 || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: exit %d, %v, want an error mentioning %q\n%s", tc.args, code, err, tc.want, out)
		}
	}
	if after := planGit(t, dir, "status", "--porcelain"); after != before {
		t.Errorf("refusals changed the working tree:\n%s\nwas\n%s", after, before)
	}
	planGit(t, dir, "add", ".")
	planGit(t, dir, "commit", "-q", "-m", "preview")
	mustRun(t, "--repo", dir, "lock")
	planGit(t, dir, "add", ".")
	planGit(t, dir, "commit", "-q", "-m", "lock preview")

	out = mustRun(t, "--repo", dir, "env", "delete", "local/preview", "--commit")
	for _, want := range []string{"removed clusters/local/environments/preview (deployments: hub, web)", "styrminctl lock --allow-deletions 2", "committed "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "clusters/local/environments/preview")); !os.IsNotExist(err) {
		t.Errorf("preview still there: %v", err)
	}
	if _, code, err := styrminctl(t, "--repo", dir, "lock"); code == 0 || !strings.Contains(err.Error(), "--allow-deletions 2") {
		t.Errorf("lock without an allowance: exit %d, %v", code, err)
	}
	mustRun(t, "--repo", dir, "lock", "--allow-deletions", "2")
}
