package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/resolver"
)

// exampleRepo copies the example desired-state repository (without locks)
// into a temporary folder.
func exampleRepo(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := examples.WriteTo(dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// styrminctl runs the CLI in-process and returns stdout and the exit code
// main would use.
func styrminctl(t *testing.T, args ...string) (string, int, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs(args)
	err := root.Execute()
	code := 0
	if err != nil {
		code = 1
		var ec exitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
	}
	return out.String(), code, err
}

func TestLockWritesLockfilesAndCheckSeesThemCurrent(t *testing.T) {
	t.Parallel()
	repo := exampleRepo(t)
	if _, code, _ := styrminctl(t, "--repo", repo, "lock", "--check"); code != 2 {
		t.Fatalf("check before any lock: exit %d, want 2 (stale)", code)
	}
	out, code, err := styrminctl(t, "--repo", repo, "lock")
	if code != 0 {
		t.Fatalf("lock: exit %d: %v\n%s", code, err, out)
	}
	for _, want := range []string{"local/dev/web=1", "local/staging/hub=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("lock output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(repo, "locks/local/dev/web.lock.yaml")); err != nil {
		t.Fatal(err)
	}
	out, code, _ = styrminctl(t, "--repo", repo, "lock", "--check")
	if code != 0 {
		t.Fatalf("check after lock: exit %d\n%s", code, out)
	}
	out, _, _ = styrminctl(t, "--repo", repo, "lock")
	if !strings.Contains(out, "nothing to lock") {
		t.Fatalf("second lock should write nothing:\n%s", out)
	}
}

// TestLockWithBadInputKeepsThatLockAndLocksTheOthers pins the one fan-out
// policy: a deployment that does not resolve keeps its lock, the others
// lock, and the exit code says so; --all-or-nothing writes nothing.
func TestLockWithBadInputKeepsThatLockAndLocksTheOthers(t *testing.T) {
	t.Parallel()
	repo := exampleRepo(t)
	bad := filepath.Join(repo, "clusters/local/environments/dev/deployments/web.cue")
	if err := os.WriteFile(bad, []byte("driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, code, err := styrminctl(t, "--repo", repo, "lock", "--all-or-nothing")
	if code != 1 || err == nil || !strings.Contains(err.Error(), "clusters/local/environments/dev/deployments/web.cue") || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("exit %d, error %v; want 1 and an error naming the file and field", code, err)
	}
	if _, err := os.Stat(filepath.Join(repo, "locks")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("--all-or-nothing with bad input wrote locks: %v", err)
	}
	out, code, err := styrminctl(t, "--repo", repo, "lock")
	if code != 1 || err == nil || !strings.Contains(err.Error(), "local/dev/web") || !strings.Contains(out, "local/staging/web=1") || strings.Contains(out, "local/dev/web=") {
		t.Fatalf("default policy: exit %d, %v\n%s", code, err, out)
	}
	if _, err := os.Stat(filepath.Join(repo, "locks/local/dev/web.lock.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the deployment that does not resolve was locked: %v", err)
	}
}

func TestExplainNamesTheLayerOfEachValue(t *testing.T) {
	t.Parallel()
	repo := exampleRepo(t)
	out, code, err := styrminctl(t, "--repo", repo, "explain", "local/staging/hub")
	if code != 0 {
		t.Fatalf("explain: %v", err)
	}
	for _, want := range []string{
		`parameters.logLevel = "warning"`, "from deployment (clusters/local/environments/staging/deployments/hub.cue)",
		`parameters.workers = 2`, "from driver (drivers/graphhub/1.0.0)",
		`config.logFormat = "json"`, "from cluster (clusters/local/cluster.cue)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := styrminctl(t, "--repo", repo, "explain", "local/staging/nope"); err == nil || !strings.Contains(err.Error(), "not defined") {
		t.Fatalf("explain of a missing deployment: %v", err)
	}
}

// TestEveryLockPathRefusesDeletionsAboveTheThreshold pins the deletion
// rule in lock, lock --commit and lock --push (the CI merge step): two
// deployments removed with the example's threshold of 1 are refused,
// naming them and the allowance, and nothing is written or committed;
// --allow-deletions 2 lets them through, and the commit records it in a
// Styrmin-Allow-Deletions trailer.
func TestEveryLockPathRefusesDeletionsAboveTheThreshold(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	for _, f := range []string{"clusters/local/environments/staging/deployments/web.yaml", "clusters/local/environments/staging/deployments/hub.cue"} {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(f))); err != nil {
			t.Fatal(err)
		}
	}
	planGit(t, dir, "commit", "-q", "-am", "remove staging")
	planGit(t, dir, "push", "-q", "origin", "HEAD:main") // merged: what --push locks
	head := planGit(t, dir, "rev-parse", "HEAD")
	lockBefore, err := os.ReadFile(filepath.Join(dir, "locks/local/staging/web.lock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"lock"}, {"lock", "--all-or-nothing"}, {"lock", "--commit"}, {"lock", "--push", "--branch", "main"}, {"lock", "--allow-deletions", "1"}} {
		out, code, err := styrminctl(t, append([]string{"--repo", dir}, args...)...)
		if code == 0 || err == nil || !strings.Contains(err.Error(), "lock refused: it deletes 2 deployments (local/staging/hub, local/staging/web)") ||
			!strings.Contains(err.Error(), "--allow-deletions 2") {
			t.Errorf("%v: exit %d, %v\n%s; want refused, naming both and the allowance", args, code, err, out)
		}
		if got := planGit(t, dir, "rev-parse", "HEAD"); got != head {
			t.Fatalf("%v committed %s despite the refusal", args, got)
		}
		if got := planGit(t, dir, "ls-remote", "origin", "refs/heads/main"); !strings.HasPrefix(got, head) {
			t.Fatalf("%v pushed despite the refusal: origin/main is %s", args, got)
		}
		if now, _ := os.ReadFile(filepath.Join(dir, "locks/local/staging/web.lock.yaml")); !bytes.Equal(now, lockBefore) {
			t.Fatalf("%v wrote a lockfile despite the refusal", args)
		}
	}
	out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit", "--allow-deletions", "2")
	if code != 0 {
		t.Fatalf("allowed: exit %d, %v\n%s", code, err, out)
	}
	if msg := planGit(t, dir, "log", "-1", "--format=%B"); !strings.Contains(msg, "Styrmin-Allow-Deletions: 2") || !strings.Contains(msg, "Styrmin-Lock: local/staging/web=2") {
		t.Errorf("the allowed lock commit's message lacks the allowance or the tombstones:\n%s", msg)
	}
}

// TestLockCheckTellsStaleFromBroken: CI can tell a pull request whose
// locks are stale (exit 2) from one whose configuration does not resolve
// (exit 1).
func TestLockCheckTellsStaleFromBroken(t *testing.T) {
	t.Parallel()
	repo := exampleRepo(t)
	if _, code, _ := styrminctl(t, "--repo", repo, "lock", "--check"); code != 2 {
		t.Fatalf("stale: exit %d, want 2", code)
	}
	writeRepoFile(t, repo, devWebFile, "driver: \"webapp\"\nappVersion: \"99.0.0\"\n")
	if _, code, err := styrminctl(t, "--repo", repo, "lock", "--check"); code != 1 || err == nil || !strings.Contains(err.Error(), devWebFile) {
		t.Fatalf("broken: exit %d, %v; want 1 naming the file", code, err)
	}
}

// TestSensitiveValueNeverLeavesItsFileInTheCLI marks a parameter
// sensitive, gives it a value, and looks for the value in every form a
// leak could take in what the CLI writes: the lockfile, the plan in text,
// markdown and JSON, the full diff, explain in text, JSON and YAML.
func TestSensitiveValueNeverLeavesItsFileInTheCLI(t *testing.T) {
	t.Parallel()
	const secret = "Pa ss/w0rd+launch&code"
	repo := lockedGitRepo(t)
	spec := filepath.Join(repo, "drivers/webapp/1.1.0/driver.cue")
	src, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	marked := strings.Replace(string(src), `message: *"Hello from Styrmin" | string & !=""`, `message: *"Hello from Styrmin" | string & !="" @styrmin(sensitive)`, 1)
	if marked == string(src) {
		t.Fatal("webapp's message parameter not found; update the test")
	}
	if err := os.WriteFile(spec, []byte(marked), 0o644); err != nil {
		t.Fatal(err)
	}
	writeRepoFile(t, repo, devWebFile, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \""+secret+"\"}\n")

	outputs := map[string]string{}
	for _, f := range []string{"text", "markdown", "json"} {
		out, _, err := styrminctl(t, "--repo", repo, "plan", "-o", f)
		if err != nil {
			t.Fatalf("plan -o %s: %v", f, err)
		}
		outputs["plan -o "+f] = out
	}
	out, _, err := styrminctl(t, "--repo", repo, "diff", "local/dev/web")
	if err != nil {
		t.Fatalf("diff: %v", err)
	}
	outputs["diff"] = out
	for _, f := range []string{"text", "json", "yaml"} {
		out, _, err := styrminctl(t, "--repo", repo, "explain", "local/dev/web", "-o", f)
		if err != nil {
			t.Fatalf("explain -o %s: %v", f, err)
		}
		if !strings.Contains(out, sensitiveShown) {
			t.Errorf("explain -o %s does not show the parameter as %s:\n%s", f, sensitiveShown, out)
		}
		outputs["explain -o "+f] = out
	}
	if _, _, err := styrminctl(t, "--repo", repo, "lock"); err != nil {
		t.Fatalf("lock: %v", err)
	}
	lock, err := os.ReadFile(filepath.Join(repo, "locks/local/dev/web.lock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	outputs["lockfile"] = string(lock)
	for name, out := range outputs {
		if found := secrettest.Find([]byte(out), secret); len(found) > 0 {
			t.Errorf("%s holds %s:\n%s", name, strings.Join(found, ", "), out)
		}
	}
}

// writeLocks writes every lockfile it can, says which, and names the one
// it could not write (here a folder stands where its file goes).
func TestWriteLocksWritesTheOthersWhenOneFails(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	var changes []resolver.LockChange
	for i := range 12 {
		id := resolver.ID{Cluster: "c", Environment: "e", Name: fmt.Sprintf("d%02d", i)}
		changes = append(changes, resolver.LockChange{ID: id, Data: []byte(id.String() + "\n")})
	}
	blocked := changes[5].Path()
	if err := os.MkdirAll(filepath.Join(root, blocked, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	written, err := writeLocks(root, changes)
	if err == nil || !strings.Contains(err.Error(), "d05") {
		t.Fatalf("err = %v, want one naming %s", err, blocked)
	}
	for i, c := range changes {
		data, rerr := os.ReadFile(filepath.Join(root, c.Path()))
		if i == 5 {
			if written[i] {
				t.Errorf("%s reported written", c.Path())
			}
			continue
		}
		if !written[i] || rerr != nil || string(data) != c.ID.String()+"\n" {
			t.Errorf("%s: written %v, %q, %v", c.Path(), written[i], data, rerr)
		}
	}
	// No temporary file is left behind.
	left, _ := filepath.Glob(filepath.Join(root, "locks", "c", "e", resolver.LockTempPrefix+"*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestALockKilledBeforeItsRenameDoesNotStopTheNextOne pins what a lock
// killed while writing (a cancelled CI job) leaves: a temporary file
// beside the lockfiles, which the next lock skips rather than
// refuse as an unexpected file, and which a later lock removes once it is
// clearly nobody's (a fresh one may be a lock running beside it). The
// lockfiles are readable by all, as git checks files out.
func TestALockKilledBeforeItsRenameDoesNotStopTheNextOne(t *testing.T) {
	t.Parallel()
	repo := exampleRepo(t)
	if _, code, err := styrminctl(t, "--repo", repo, "lock"); code != 0 {
		t.Fatalf("lock: exit %d: %v", code, err)
	}
	dir := filepath.Join(repo, "locks/local/dev")
	old, fresh := filepath.Join(dir, resolver.LockTempPrefix+"1234"), filepath.Join(dir, resolver.LockTempPrefix+"5678")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("apiVersion: styrmin.io/v1alpha1\nkind: Inst"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	if out, code, err := styrminctl(t, "--repo", repo, "lock", "--check"); code != 0 {
		t.Fatalf("lock --check beside a killed lock's temporary files: exit %d: %v\n%s", code, err, out)
	}
	web := filepath.Join(repo, "clusters/local/environments/dev/deployments/web.cue")
	data, err := os.ReadFile(web)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(web, bytes.Replace(data, []byte("replicas: 2"), []byte("replicas: 3"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code, err := styrminctl(t, "--repo", repo, "lock")
	if code != 0 || !strings.Contains(out, "local/dev/web=2") {
		t.Fatalf("lock beside a killed lock's temporary files: exit %d: %v\n%s", code, err, out)
	}
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an hour-old temporary lockfile is still there (%v)", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a fresh temporary lockfile, maybe another lock's, was removed: %v", err)
	}
	for _, name := range []string{"web.lock.yaml", "hub.lock.yaml"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v (%v), want -rw-r--r--", name, fi.Mode().Perm(), err)
		}
	}
}

// TestLockCheckWithCommitOrPushIsRefusedAndCommitsNothing: --check is a
// pull request's judgement; with --commit or --push it must not land a
// lock commit (it once did, exiting 0).
func TestLockCheckWithCommitOrPushIsRefusedAndCommitsNothing(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	planGit(t, dir, "commit", "-q", "-am", "web: three replicas")
	head := planGit(t, dir, "rev-parse", "HEAD")
	remote := planGit(t, dir, "ls-remote", "origin", "refs/heads/main")
	for _, flag := range []string{"--commit", "--push"} {
		out, code, err := styrminctl(t, "--repo", dir, "lock", "--check", flag)
		var ue usageError
		if code != 1 || !errors.As(err, &ue) || !strings.Contains(err.Error(), flag) {
			t.Errorf("lock --check %s: exit %d, %v; want a usage error naming %s\n%s", flag, code, err, flag, out)
		}
		if now := planGit(t, dir, "rev-parse", "HEAD"); now != head {
			t.Fatalf("lock --check %s committed: HEAD moved from %s to %s", flag, head, now)
		}
	}
	if now := planGit(t, dir, "ls-remote", "origin", "refs/heads/main"); now != remote {
		t.Fatalf("lock --check --push moved the remote branch: %s, was %s", now, remote)
	}
}

// TestLockCommitSaysItDidNotLockUncommittedEdits: lock --commit locks the
// committed head; with configuration edits in the working tree it said
// only "nothing to lock", as if it had seen them and they changed nothing.
func TestLockCommitSaysItDidNotLockUncommittedEdits(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit")
	if code != 0 || !strings.Contains(out, "nothing to lock") || !strings.Contains(out, "uncommitted configuration edits, which are not locked") {
		t.Fatalf("lock --commit with uncommitted edits: exit %d, %v:\n%s", code, err, out)
	}
	planGit(t, dir, "commit", "-q", "-am", "web: three replicas")
	out, code, err = styrminctl(t, "--repo", dir, "lock", "--commit")
	if code != 0 || strings.Contains(out, "uncommitted") || !strings.Contains(out, "locked local/dev/web=") {
		t.Fatalf("lock --commit of the committed edit: exit %d, %v:\n%s", code, err, out)
	}
}

// A driver version folder that does not load holds back, in a lock, only
// the deployments whose version it could be chosen for; the others lock,
// and the lock names the folder. The pull request's check (lock --check,
// as the plan) stays strict and fails naming it.
func TestALockLeavesOutADriverVersionThatDoesNotLoadAndItsCheckFailsOnIt(t *testing.T) {
	t.Parallel()
	dir := exampleRepo(t)
	broken := filepath.Join(dir, "drivers/unused/1.0.0")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "driver.cue"), []byte("name: \"unused\"\nversion: \"1.0.0\"\nparameters: {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "--repo", dir, "lock", "--check")
	if code != 1 || !strings.Contains(out+errOut, "drivers/unused/1.0.0/driver.cue") {
		t.Fatalf("lock --check exit %d, want 1 naming the folder\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = run(t, "--repo", dir, "lock")
	if code != 1 || !strings.Contains(out, "locked local/dev/web") ||
		!strings.Contains(errOut, "driver unused@1.0.0 does not load and was left out: drivers/unused/1.0.0/driver.cue") {
		t.Fatalf("lock exit %d, want 1, every deployment locked and the folder named\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = run(t, "--repo", dir, "lock", "--all-or-nothing")
	if code == 0 {
		t.Fatalf("lock --all-or-nothing exit 0 with a driver that does not load\n%s\n%s", out, errOut)
	}
	// A broken version above the one hub's application version fits (it
	// may fit too) holds hub back: hub's error names it with its folder,
	// and it is not named a second time; the unused one still is.
	if err := os.RemoveAll(filepath.Join(dir, "locks")); err != nil {
		t.Fatal(err)
	}
	above := filepath.Join(dir, "drivers/graphhub/9.0.0")
	if err := os.MkdirAll(above, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(above, "driver.cue"), []byte("name: \"graphhub\"\nversion: \"9.0.0\"\nappVersions: \">=1.0.0\"\nparameters: {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = run(t, "--repo", dir, "lock")
	if code != 1 || !strings.Contains(errOut, "local/dev/hub") || strings.Count(errOut, "graphhub@9.0.0") != 1 ||
		!strings.Contains(errOut, "drivers/graphhub/9.0.0/driver.cue") || strings.Count(errOut, "unused@1.0.0") != 1 {
		t.Fatalf("lock exit %d, want 1, hub held back naming graphhub@9.0.0 once, unused@1.0.0 named once\n%s\n%s", code, out, errOut)
	}
}

// TestPlanAndLockRefuseABackupLocationTwoClustersShare: clusters/local
// copied to clusters/eu keeps local's s3:// locations, where both agents
// would write their dev-YYYYMMDD-HHMM and delete each other's by
// retention: plan and lock refuse it, naming both files and the field,
// and lock writes nothing. (The repository's load, which the agent reads
// sensitive values through, leaves it to them.)
func TestPlanAndLockRefuseABackupLocationTwoClustersShare(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	if err := os.CopyFS(filepath.Join(dir, "clusters/eu"), os.DirFS(filepath.Join(dir, "clusters/local"))); err != nil {
		t.Fatal(err)
	}
	want := []string{"clusters/local/environments/dev/environment.cue:2:", "clusters/eu/environments/dev/environment.cue:2:", "field backupLocation", `"s3://backups/local/dev"`,
		"environments of the same name in two clusters"}
	out, code, err := styrminctl(t, "--repo", dir, "plan")
	if code == 0 || err == nil {
		t.Fatalf("plan: exit %d, error %v\n%s", code, err, out)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("plan: %q lacks %q", err, w)
		}
	}
	before := snapshot(t, dir)
	out, code, err = styrminctl(t, "--repo", dir, "lock")
	if code != 1 || err == nil {
		t.Fatalf("lock: exit %d, error %v\n%s", code, err, out)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("lock: %q lacks %q", err, w)
		}
	}
	if after := snapshot(t, dir); !maps.Equal(after, before) {
		t.Error("lock changed files")
	}
}
