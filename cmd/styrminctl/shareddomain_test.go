package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockWarnsOfTwoClustersRenderingTheSameHostsAndLocks: a second
// cluster keeping the first's domain, with an environment of the same
// name, renders the same external hosts. lock says so, naming both
// files, and locks (a blue/green pair shares a domain on purpose);
// sharedDomain: true in both cluster.cue silences it, and only
// cluster.cue may say it.
func TestLockWarnsOfTwoClustersRenderingTheSameHostsAndLocks(t *testing.T) {
	t.Parallel()
	repo := exampleRepo(t)
	if err := os.MkdirAll(filepath.Join(repo, "clusters", "other", "environments", "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	const other = "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\n"
	writeRepoFile(t, repo, "clusters/other/cluster.cue", other)
	writeRepoFile(t, repo, "clusters/other/environments/dev/environment.cue", "namespacePrefix: \"dev\"\n")
	out, code, err := styrminctl(t, "--repo", repo, "lock")
	if code != 0 {
		t.Fatalf("lock: exit %d: %v\n%s", code, err, out)
	}
	for _, want := range []string{"warning: clusters/local/cluster.cue, clusters/other/cluster.cue: field domain:", "environment dev", "sharedDomain: true", "locked local/dev/web=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("lock output lacks %q:\n%s", want, out)
		}
	}

	writeRepoFile(t, repo, "clusters/other/cluster.cue", other+"sharedDomain: true\n")
	if out, _, _ := styrminctl(t, "--repo", repo, "lock"); !strings.Contains(out, "warning:") {
		t.Errorf("one cluster of two saying sharedDomain silenced the warning:\n%s", out)
	}
	local := "clusters/local/cluster.cue"
	writeRepoFile(t, repo, local, "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nsharedDomain: true\n")
	if out, _, _ := styrminctl(t, "--repo", repo, "lock"); strings.Contains(out, "warning:") {
		t.Errorf("both clusters say sharedDomain, yet:\n%s", out)
	}

	env := "clusters/other/environments/dev/environment.cue"
	writeRepoFile(t, repo, env, "namespacePrefix: \"dev\"\nsharedDomain: true\n")
	if _, _, err := styrminctl(t, "--repo", repo, "lock"); err == nil || !strings.Contains(err.Error(), env) || !strings.Contains(err.Error(), "sharedDomain") {
		t.Errorf("sharedDomain in environment.cue: %v, want an error naming %s and the field", err, env)
	}
}

// TestACloneIntoAClusterOfTheSameDomainUnderAnEnvironmentsNameIsWarnedOf:
// env clone local/dev into cluster other, of the same domain, as "dev"
// renders local/dev's external hosts there; the clone said nothing. It
// is written (a blue/green copy may mean it) and warns as plan and lock
// do; a clone under another name says nothing.
func TestACloneIntoAClusterOfTheSameDomainUnderAnEnvironmentsNameIsWarnedOf(t *testing.T) {
	t.Parallel()
	dir := upgradeGitRepo(t)
	if err := os.MkdirAll(filepath.Join(dir, "clusters", "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeRepoFile(t, dir, "clusters/other/cluster.cue", "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\n")
	planGit(t, dir, "add", "-A")
	planGit(t, dir, "commit", "-q", "-m", "cluster other")

	writeRepoFile(t, dir, "clusters/local/environments/dev/deployments/web.cue.bak", "driver: \"webapp\"\n")
	planGit(t, dir, "add", "-A")
	planGit(t, dir, "commit", "-q", "-m", "a backup file")
	out := mustRun(t, "--repo", dir, "env", "clone", "local/dev", "preview", "--cluster", "other")
	if strings.Contains(out, "warning:") {
		t.Errorf("a clone under a name of its own warned:\n%s", out)
	}
	// The clone names the file it leaves, Styrmin reading none such.
	if !strings.Contains(out, "not copied, being no file Styrmin reads") || !strings.Contains(out, "deployments/web.cue.bak") {
		t.Errorf("the clone does not name deployments/web.cue.bak as not copied:\n%s", out)
	}
	planGit(t, dir, "add", "-A")
	planGit(t, dir, "commit", "-q", "-m", "preview")
	out = mustRun(t, "--repo", dir, "env", "clone", "local/dev", "dev", "--cluster", "other")
	for _, want := range []string{"wrote clusters/other/environments/dev", "warning: clusters/local/cluster.cue, clusters/other/cluster.cue: field domain: clusters local, other each give environment dev the domain", "sharedDomain: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("clone output lacks %q:\n%s", want, out)
		}
	}
}
