package main

import (
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/resolver"
)

// upgradeGitRepo is the example repository, locked and committed on main
// (no remote: upgrade --commit commits locally).
func upgradeGitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := exampleRepo(t)
	if _, code, err := styrminctl(t, "--repo", dir, "lock"); code != 0 {
		t.Fatalf("lock: %v", err)
	}
	planGit(t, dir, "init", "-q", "-b", "main")
	planGit(t, dir, "add", ".")
	planGit(t, dir, "commit", "-q", "-m", "locked")
	return dir
}

// loadNewerWebappBuild adds webapp 1.2.0, a copy of 1.1.0, and commits it.
func loadNewerWebappBuild(t *testing.T, dir string) {
	t.Helper()
	src, dst := filepath.Join(dir, "drivers/webapp/1.1.0"), filepath.Join(dir, "drivers/webapp/1.2.0")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dst, "driver.cue")
	b, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte(strings.Replace(string(b), `version:     "1.1.0"`, `version:     "1.2.0"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	planGit(t, dir, "add", ".")
	planGit(t, dir, "commit", "-q", "-m", "webapp 1.2.0")
}

// lockOf reads a deployment's lockfile from the working tree.
func lockOf(t *testing.T, dir, id string) *resolver.Instance {
	t.Helper()
	rid, err := resolver.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	in, err := resolver.ReadLock(os.DirFS(dir), rid.LockPath())
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, code, err := styrminctl(t, args...)
	if code != 0 {
		t.Fatalf("styrminctl %s: exit %d: %v\n%s", strings.Join(args, " "), code, err, out)
	}
	return out
}

// clusterFanOut changes a cluster value every deployment inherits.
func clusterFanOut(t *testing.T, dir, logFormat string) {
	t.Helper()
	writeRepoFile(t, dir, "clusters/local/cluster.cue", `domain:       "local.styrmin.dev"
ingressClass: "nginx"
storageClasses: default: "standard"
config: logFormat: "`+logFormat+`"
parameters: logLevel: "info"
`)
}

func TestClusterFanOutKeepsTheDriverVersionOfAnEarlierUpgradeRequest(t *testing.T) {
	t.Parallel()
	dir := upgradeGitRepo(t)
	// An earlier upgrade request, honoured by its lock.
	mustRun(t, "--repo", dir, "upgrade", "local/dev/web", "--commit")
	mustRun(t, "--repo", dir, "lock", "--commit")
	before := lockOf(t, dir, "local/dev/web")
	if before.Driver.Version != "1.1.0" || before.Driver.UpgradeRequest == "" {
		t.Fatalf("after the first upgrade: %+v", before.Driver)
	}
	file, err := os.ReadFile(filepath.Join(dir, devWebFile))
	if err != nil || !strings.Contains(string(file), "upgrade: \""+before.Driver.UpgradeRequest+"\"") {
		t.Fatalf("the deployment file lost its request (%v):\n%s", err, file)
	}

	// A newer build is loaded; a cluster fan-out re-resolves every
	// deployment, through both lock paths.
	loadNewerWebappBuild(t, dir)
	clusterFanOut(t, dir, "text")
	out := mustRun(t, "--repo", dir, "lock")
	if !strings.Contains(out, "local/dev/web=") {
		t.Fatalf("the fan-out did not reach dev/web:\n%s", out)
	}
	if got := lockOf(t, dir, "local/dev/web").Driver; got.Version != "1.1.0" || got.UpgradeRequest != before.Driver.UpgradeRequest {
		t.Fatalf("a fan-out moved dev/web to %+v", got)
	}
	planGit(t, dir, "commit", "-q", "-am", "fan-out")
	clusterFanOut(t, dir, "logfmt")
	planGit(t, dir, "commit", "-q", "-am", "another fan-out")
	mustRun(t, "--repo", dir, "lock", "--commit")
	if got := lockOf(t, dir, "local/dev/web").Driver; got.Version != "1.1.0" {
		t.Fatalf("a committed fan-out moved dev/web to %+v", got)
	}
}

func TestUpgradeThenLockMovesToTheNewestBuildOnce(t *testing.T) {
	t.Parallel()
	dir := upgradeGitRepo(t)
	loadNewerWebappBuild(t, dir)
	// Loading a build moves nothing by itself.
	if out := mustRun(t, "--repo", dir, "lock"); !strings.Contains(out, "nothing to lock") {
		t.Fatalf("a newly loaded build was locked without an upgrade:\n%s", out)
	}
	out := mustRun(t, "--repo", dir, "upgrade", "local/dev/web")
	if !strings.Contains(out, "edited "+devWebFile) || !strings.Contains(out, "webapp@1.1.0 → webapp@1.2.0") {
		t.Fatalf("upgrade output:\n%s", out)
	}
	out = mustRun(t, "--repo", dir, "lock")
	if !strings.Contains(out, "local/dev/web=2") || strings.Count(out, "locked ") != 1 {
		t.Fatalf("lock after upgrade:\n%s", out)
	}
	if got := lockOf(t, dir, "local/dev/web").Driver.Version; got != "1.2.0" {
		t.Fatalf("dev/web at %s, want 1.2.0", got)
	}
	// Once: the request is spent, a fan-out keeps 1.2.0.
	if out := mustRun(t, "--repo", dir, "lock"); !strings.Contains(out, "nothing to lock") {
		t.Fatalf("the request was honoured twice:\n%s", out)
	}
	clusterFanOut(t, dir, "text")
	mustRun(t, "--repo", dir, "lock")
	if got := lockOf(t, dir, "local/dev/web"); got.Driver.Version != "1.2.0" || got.Sequence != 3 {
		t.Fatalf("after the fan-out: %s at sequence %d, want 1.2.0 at 3", got.Driver.Version, got.Sequence)
	}
}

func TestEnvironmentWideUpgradeIsOneCommit(t *testing.T) {
	t.Parallel()
	dir := upgradeGitRepo(t)
	loadNewerWebappBuild(t, dir)
	head := planGit(t, dir, "rev-parse", "HEAD")
	out := mustRun(t, "--repo", dir, "upgrade", "local/dev", "--commit")
	for _, want := range []string{"edited " + devWebFile, "edited clusters/local/environments/dev/deployments/hub.cue", "committed "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := planGit(t, dir, "rev-list", "--count", head+"..HEAD"); n != "1" {
		t.Fatalf("%s commits, want 1", n)
	}
	files := planGit(t, dir, "diff", "--name-only", head, "HEAD")
	if files != "clusters/local/environments/dev/deployments/hub.cue\n"+devWebFile {
		t.Fatalf("the commit changed:\n%s", files)
	}
	msg := planGit(t, dir, "log", "-1", "--format=%B")
	for _, want := range []string{"styrmin: upgrade local/dev: newest driver build (request ", "Styrmin-Upgrade: local/dev/hub", "Styrmin-Upgrade: local/dev/web"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if st := planGit(t, dir, "status", "--porcelain"); st != "" {
		t.Fatalf("the worktree is not clean after the commit:\n%s", st)
	}
	// Only the value changed: hub's layout and parameters stay.
	diff := planGit(t, dir, "diff", "-U0", head, "HEAD", "--", "clusters/local/environments/dev/deployments/hub.cue")
	if strings.Count(diff, "\n+") != 2 || !strings.Contains(diff, `+driver:     {name: "graphhub", upgrade: "`) {
		t.Fatalf("hub's edit:\n%s", diff)
	}
	out = mustRun(t, "--repo", dir, "lock", "--commit")
	if got := lockOf(t, dir, "local/dev/web").Driver.Version; got != "1.2.0" {
		t.Fatalf("dev/web at %s after the lock, want 1.2.0:\n%s", got, out)
	}
	// staging: the YAML file is edited, the pinned hub skipped.
	out = mustRun(t, "--repo", dir, "upgrade", "local/staging")
	if !strings.Contains(out, "edited clusters/local/environments/staging/deployments/web.yaml") || !strings.Contains(out, "skipped local/staging/hub: pins driver graphhub 1.0.0") {
		t.Fatalf("staging:\n%s", out)
	}
}

func TestUpgradeSetsTheAppVersionAndPinsTheDriverVersion(t *testing.T) {
	t.Parallel()
	dir := upgradeGitRepo(t)
	mustRun(t, "--repo", dir, "upgrade", "local/dev/web", "--app-version", "1.26.0")
	b, _ := os.ReadFile(filepath.Join(dir, devWebFile))
	if want := "driver:     \"webapp\"\nappVersion: \"1.26.0\"\nparameters: replicas: 2\n"; string(b) != want {
		t.Fatalf("web.cue:\n%s\nwant\n%s", b, want)
	}
	mustRun(t, "--repo", dir, "lock")
	if got := lockOf(t, dir, "local/dev/web"); got.AppVersion != "1.26.0" || got.Driver.Version != "1.1.0" {
		t.Fatalf("lock: app %s driver %s", got.AppVersion, got.Driver.Version)
	}
	mustRun(t, "--repo", dir, "upgrade", "local/dev/web", "--driver-version", "1.0.0")
	b, _ = os.ReadFile(filepath.Join(dir, devWebFile))
	if !strings.Contains(string(b), `driver:     {name: "webapp", version: "1.0.0"}`) {
		t.Fatalf("web.cue:\n%s", b)
	}
	mustRun(t, "--repo", dir, "lock")
	if got := lockOf(t, dir, "local/dev/web"); got.Driver.Version != "1.0.0" || got.Driver.UpgradeRequest != "" {
		t.Fatalf("lock: driver %+v, want 1.0.0 without a request", got.Driver)
	}
	// Asking again for what is there changes nothing.
	if out := mustRun(t, "--repo", dir, "upgrade", "local/dev/web", "--driver-version", "1.0.0"); !strings.Contains(out, "nothing to change") {
		t.Fatalf("second pin:\n%s", out)
	}
}

// snapshot is every file of the working tree and the branch head.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{"HEAD": planGit(t, dir, "rev-parse", "HEAD")}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.Name() == ".git" {
				return filepath.SkipDir
			}
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestUpgradeBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	dir := upgradeGitRepo(t)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown deployment", []string{"local/dev/nosuch"}, []string{"clusters/local/environments/dev/deployments/nosuch.cue", `no deployment "nosuch"`}},
		{"unknown environment", []string{"local/prod", "--commit"}, []string{"clusters/local/environments/prod/environment.cue", `no environment "prod"`}},
		{"bad target", []string{"local"}, []string{"CLUSTER/ENVIRONMENT"}},
		{"driver version not loaded", []string{"local/dev/web", "--driver-version", "9.9.9"}, []string{devWebFile, "field driver.version", "no version 9.9.9 loaded (loaded: 1.0.0, 1.1.0)"}},
		{"driver version not loaded, committed", []string{"local/dev", "--driver-version", "1.1.0", "--commit"}, []string{"dev/deployments/hub.cue", "field driver.version", "driver graphhub has no version 1.1.0"}},
		{"app version no driver supports", []string{"local/dev/web", "--app-version", "3.0.0"}, []string{devWebFile, "field driver", "no version supports application version 3.0.0"}},
		{"app version no driver supports, environment-wide", []string{"local/dev", "--app-version", "2.5.0", "--commit"}, []string{"dev/deployments/hub.cue", devWebFile, "no version supports application version 2.5.0"}},
		{"not a version", []string{"local/dev/web", "--app-version", "latest"}, []string{devWebFile, "field appVersion"}},
		{"newest build of a pinned deployment", []string{"local/staging/hub"}, []string{"staging/deployments/hub.cue", "field driver.version", "pins driver graphhub 1.0.0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, dir)
			out, code, err := styrminctl(t, append([]string{"--repo", dir, "upgrade"}, c.args...)...)
			if code != 1 || err == nil {
				t.Fatalf("exit %d, error %v\n%s", code, err, out)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			after := snapshot(t, dir)
			for k, v := range before {
				if after[k] != v {
					t.Errorf("%s changed", k)
				}
			}
			if len(after) != len(before) {
				t.Errorf("%d files before, %d after", len(before), len(after))
			}
		})
	}
}

func TestUpgradeCommitRefusesAFileWithUncommittedChanges(t *testing.T) {
	t.Parallel()
	dir := upgradeGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	head := planGit(t, dir, "rev-parse", "HEAD")
	_, code, err := styrminctl(t, "--repo", dir, "upgrade", "local/dev/web", "--commit")
	if code != 1 || err == nil || !strings.Contains(err.Error(), devWebFile) || !strings.Contains(err.Error(), "uncommitted changes") {
		t.Fatalf("exit %d, error %v", code, err)
	}
	if got := planGit(t, dir, "rev-parse", "HEAD"); got != head {
		t.Fatalf("HEAD moved to %s", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, devWebFile)); !strings.Contains(string(b), "replicas: 3") {
		t.Fatalf("the uncommitted edit was lost:\n%s", b)
	}
}

// TestUpgradeBackupFirstWithoutABackupLocationChangesNothing: in an
// environment with no backupLocation, upgrade --backup-first (in the
// working tree or committed) and a lock of backupBeforeUpgrade written by
// hand are refused, naming the file, the field and what to set, rather
// than lock an upgrade whose backup would fail at its first step in the
// agent. Nothing changes.
func TestUpgradeBackupFirstWithoutABackupLocationChangesNothing(t *testing.T) {
	t.Parallel()
	const (
		env = "clusters/local/environments/dev/environment.cue"
		hub = "clusters/local/environments/dev/deployments/hub.cue"
	)
	dir := upgradeGitRepo(t)
	writeRepoFile(t, dir, env, "namespacePrefix: \"dev\"\n")
	mustRun(t, "--repo", dir, "lock")
	planGit(t, dir, "add", ".")
	planGit(t, dir, "commit", "-q", "-m", "dev keeps no backups")
	hand, err := os.ReadFile(filepath.Join(dir, hub))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		edit  bool // backupBeforeUpgrade written by hand first
		args  []string
		where string
	}{
		{"upgrade", false, []string{"upgrade", "local/dev/hub", "--app-version", "1.4.1", "--backup-first"}, hub},
		{"upgrade --commit", false, []string{"upgrade", "local/dev/hub", "--app-version", "1.4.1", "--backup-first", "--commit"}, hub},
		{"lock", true, []string{"lock"}, hub + ":8:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.edit {
				writeRepoFile(t, dir, hub, string(hand)+"backupBeforeUpgrade: true\n")
				defer writeRepoFile(t, dir, hub, string(hand))
			}
			before := snapshot(t, dir)
			out, code, err := styrminctl(t, append([]string{"--repo", dir}, c.args...)...)
			if code != 1 || err == nil {
				t.Fatalf("exit %d, error %v\n%s", code, err, out)
			}
			for _, w := range []string{c.where, "field backupBeforeUpgrade", "environment local/dev has no backupLocation", "set backupLocation"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if after := snapshot(t, dir); !maps.Equal(after, before) {
				t.Errorf("files or HEAD changed")
			}
		})
	}
}
