package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/resolver"
)

const devHubFile = "clusters/local/environments/dev/deployments/hub.cue"

// hubAt is the dev hub deployment at an application version.
func hubAt(version string) string {
	return "driver:     \"graphhub\"\nappVersion: \"" + version + "\"\nconnects: [\"web\"]\nparameters: {\n\tworkers: 2\n\tdatabasePassword: {name: \"hub-db\", key: \"password\"}\n}\n"
}

// readLock reads a lockfile of the working tree.
func readLock(t *testing.T, dir, rel string) *resolver.Instance {
	t.Helper()
	in, err := resolver.ReadLock(os.DirFS(dir), rel)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// lockAtCommit reads a lockfile as one commit has it.
func lockAtCommit(t *testing.T, dir, rev, rel string) *resolver.Instance {
	t.Helper()
	data := planGit(t, dir, "show", rev+":"+rel)
	in, err := resolver.DecodeLock(rel, []byte(data+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// twoUpgrades commits two upgrades of dev/hub (1.4.0 → 1.5.0 → 1.6.0) and
// a README edit between them, none locked; it returns the two upgrade
// commits.
func twoUpgrades(t *testing.T, dir string) (first, second string) {
	t.Helper()
	writeRepoFile(t, dir, devHubFile, hubAt("1.5.0"))
	planGit(t, dir, "commit", "-q", "-am", "hub 1.5.0")
	first = planGit(t, dir, "rev-parse", "HEAD")
	writeRepoFile(t, dir, "README.md", "notes\n")
	planGit(t, dir, "add", "README.md")
	planGit(t, dir, "commit", "-q", "-m", "readme")
	writeRepoFile(t, dir, devHubFile, hubAt("1.6.0"))
	planGit(t, dir, "commit", "-q", "-am", "hub 1.6.0")
	second = planGit(t, dir, "rev-parse", "HEAD")
	return first, second
}

func TestLockCommitGivesEveryConfigurationCommitItsOwnSequence(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	first, second := twoUpgrades(t, dir)

	out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit")
	if code != 0 {
		t.Fatalf("lock --commit: exit %d, %v\n%s", code, err, out)
	}
	if !strings.Contains(out, "committed 2 lock commits, one per configuration change") {
		t.Errorf("output does not say two lock commits were made:\n%s", out)
	}
	// HEAD~1 locks the first upgrade, HEAD the second, each naming its
	// configuration commit.
	const hubLock = "locks/local/dev/hub.lock.yaml"
	for _, tc := range []struct {
		rev, config, app string
		seq              int64
	}{{"HEAD~1", first, "1.5.0", 2}, {"HEAD", second, "1.6.0", 3}} {
		in := lockAtCommit(t, dir, tc.rev, hubLock)
		if in.Sequence != tc.seq || in.AppVersion != tc.app || in.SourceCommit != tc.config {
			t.Errorf("%s: hub lock is sequence %d, app %s, source %s; want %d, %s, %s", tc.rev, in.Sequence, in.AppVersion, in.SourceCommit, tc.seq, tc.app, tc.config)
		}
		msg := planGit(t, dir, "log", "-1", "--format=%B", tc.rev)
		if !strings.Contains(msg, "Styrmin-Lock: local/dev/hub="+map[int64]string{2: "2", 3: "3"}[tc.seq]) || !strings.Contains(msg, "Styrmin-Config-Commit: "+tc.config) {
			t.Errorf("%s: message lacks the lock or the configuration commit trailer:\n%s", tc.rev, msg)
		}
	}
	if parent := planGit(t, dir, "rev-parse", "HEAD~2"); parent != second {
		t.Errorf("the chain is not built on the head: HEAD~2 is %s, want %s", parent, second)
	}
	if st := planGit(t, dir, "status", "--porcelain"); st != "" {
		t.Errorf("the working tree is not clean after the chain:\n%s", st)
	}
	// Locked: nothing more to lock.
	if out, code, _ := styrminctl(t, "--repo", dir, "lock", "--commit"); code != 0 || !strings.Contains(out, "nothing to lock") {
		t.Errorf("second lock: exit %d\n%s", code, out)
	}
}

func TestLockSquashLocksTheHeadAsOneChange(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	_, second := twoUpgrades(t, dir)
	out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit", "--squash")
	if code != 0 {
		t.Fatalf("lock --commit --squash: exit %d, %v\n%s", code, err, out)
	}
	in := readLock(t, dir, "locks/local/dev/hub.lock.yaml")
	if in.Sequence != 2 || in.AppVersion != "1.6.0" || in.SourceCommit != second {
		t.Errorf("hub lock: sequence %d, app %s, source %s; want 2, 1.6.0, %s", in.Sequence, in.AppVersion, in.SourceCommit, second)
	}
	if parent := planGit(t, dir, "rev-parse", "HEAD~1"); parent != second {
		t.Errorf("squash made more than one commit: HEAD~1 is %s", parent)
	}
}

func TestLockPushPushesTheWholeChain(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	twoUpgrades(t, dir)
	planGit(t, dir, "push", "-q", "origin", "HEAD:main")
	out, code, err := styrminctl(t, "--repo", dir, "lock", "--push", "--branch", "main")
	if code != 0 {
		t.Fatalf("lock --push: exit %d, %v\n%s", code, err, out)
	}
	planGit(t, dir, "fetch", "-q", "origin")
	log := planGit(t, dir, "log", "--format=%s", "-3", "origin/main")
	if want := "styrmin: lock local/dev/hub=3\nstyrmin: lock local/dev/hub=2\nhub 1.6.0"; log != want {
		t.Errorf("origin/main history:\n%s\nwant:\n%s", log, want)
	}
}

// TestSequencesNeverRestartWhenALockfileIsDeleted: a lockfile deleted by
// hand (or restored to an older content) does not make lock use a number
// again, in the working tree and in a commit.
func TestSequencesNeverRestartWhenALockfileIsDeleted(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	planGit(t, dir, "commit", "-q", "-am", "web 3 replicas")
	if _, code, err := styrminctl(t, "--repo", dir, "lock", "--commit"); code != 0 {
		t.Fatalf("lock: %v", err)
	}
	const webLock = "locks/local/dev/web.lock.yaml"
	if in := readLock(t, dir, webLock); in.Sequence != 2 {
		t.Fatalf("web at %d, want 2", in.Sequence)
	}
	planGit(t, dir, "rm", "-q", webLock)
	planGit(t, dir, "commit", "-q", "-m", "delete web's lockfile by hand")

	out, code, err := styrminctl(t, "--repo", dir, "lock")
	if code != 0 {
		t.Fatalf("lock: exit %d, %v\n%s", code, err, out)
	}
	if in := readLock(t, dir, webLock); in.Sequence != 3 {
		t.Errorf("working-tree lock after the deletion: web at %d, want 3 (after the 2 the history used)", in.Sequence)
	}
	if err := os.Remove(filepath.Join(dir, webLock)); err != nil {
		t.Fatal(err)
	}
	if _, code, err := styrminctl(t, "--repo", dir, "lock", "--commit"); code != 0 {
		t.Fatalf("lock --commit: %v", err)
	}
	if in := readLock(t, dir, webLock); in.Sequence != 3 {
		t.Errorf("committed lock after the deletion: web at %d, want 3", in.Sequence)
	}

	// An older lockfile content restored by hand: still after the highest.
	planGit(t, dir, "checkout", "-q", "HEAD~2", "--", webLock) // sequence 2
	planGit(t, dir, "commit", "-q", "-m", "restore an old lock")
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 4\n")
	planGit(t, dir, "commit", "-q", "-am", "web 4 replicas")
	if _, code, err := styrminctl(t, "--repo", dir, "lock", "--commit"); code != 0 {
		t.Fatalf("lock --commit: %v", err)
	}
	if in := readLock(t, dir, webLock); in.Sequence != 4 {
		t.Errorf("after a restored old lock: web at %d, want 4", in.Sequence)
	}
}

func TestLockOfUncommittedEditsRecordsNoSourceCommit(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	out, code, err := styrminctl(t, "--repo", dir, "lock")
	if code != 0 {
		t.Fatalf("lock: exit %d, %v", code, err)
	}
	if !strings.Contains(out, "uncommitted edits") {
		t.Errorf("lock does not say the instances record no commit:\n%s", out)
	}
	if in := readLock(t, dir, "locks/local/dev/web.lock.yaml"); in.SourceCommit != "" {
		t.Errorf("web's instance records %s, a commit whose configuration gives another instance", in.SourceCommit)
	}
	// Committed first, then locked: the commit is recorded.
	planGit(t, dir, "checkout", "-q", "--", "locks")
	planGit(t, dir, "commit", "-q", "-am", "web 3 replicas")
	head := planGit(t, dir, "rev-parse", "HEAD")
	if _, code, err := styrminctl(t, "--repo", dir, "lock"); code != 0 {
		t.Fatal(err)
	}
	if in := readLock(t, dir, "locks/local/dev/web.lock.yaml"); in.SourceCommit != head {
		t.Errorf("web's instance records %q, want %s", in.SourceCommit, head)
	}
}

// subfolderRepo is the example repository (not locked) in deploy/ of a
// larger git repository, committed on main: a monorepo.
func subfolderRepo(t *testing.T) (root, dir string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root = t.TempDir()
	dir = filepath.Join(root, "deploy")
	if err := os.Rename(exampleRepo(t), dir); err != nil {
		t.Fatal(err)
	}
	writeRepoFile(t, root, "README.md", "a larger repository\n")
	planGit(t, root, "init", "-q", "-b", "main")
	planGit(t, root, "add", ".")
	planGit(t, root, "commit", "-q", "-m", "configuration")
	return root, dir
}

func TestLockCommitWorksForARepositoryInASubfolder(t *testing.T) {
	t.Parallel()
	root, dir := subfolderRepo(t)
	out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit")
	if code != 0 || !strings.Contains(out, "local/dev/web=1") {
		t.Fatalf("lock --commit in a sub-folder: exit %d, %v\n%s", code, err, out)
	}
	if files := planGit(t, root, "show", "--name-only", "--format=", "HEAD"); !strings.Contains(files, "deploy/locks/local/dev/web.lock.yaml") || strings.Contains(files, "\nlocks/") || strings.HasPrefix(files, "locks/") {
		t.Errorf("the lock commit does not write the sub-folder's locks:\n%s", files)
	}
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	planGit(t, root, "commit", "-q", "-am", "web 3 replicas")
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 4\n")
	planGit(t, root, "commit", "-q", "-am", "web 4 replicas")
	if out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit"); code != 0 || !strings.Contains(out, "2 lock commits") {
		t.Fatalf("second lock: exit %d, %v\n%s", code, err, out)
	}
	if in := readLock(t, dir, "locks/local/dev/web.lock.yaml"); in.Sequence != 3 {
		t.Errorf("web at %d, want 3", in.Sequence)
	}
	if out, _, _ := styrminctl(t, "--repo", dir, "lock", "--check"); !strings.Contains(out, "up to date") {
		t.Errorf("check after the lock:\n%s", out)
	}
}

// TestAnAllowanceOnTheConfigurationCommitLetsALockDelete: lock mode and CI
// take the allowance from the commit that deletes (a
// Styrmin-Allow-Deletions trailer), as a person gives --allow-deletions.
func TestAnAllowanceOnTheConfigurationCommitLetsALockDelete(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	for _, f := range []string{"clusters/local/environments/staging/deployments/web.yaml", "clusters/local/environments/staging/deployments/hub.cue"} {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(f))); err != nil {
			t.Fatal(err)
		}
	}
	planGit(t, dir, "commit", "-q", "-am", "remove staging\n\nStyrmin-Allow-Deletions: 2")
	out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit")
	if code != 0 {
		t.Fatalf("lock --commit: exit %d, %v\n%s", code, err, out)
	}
	if in := readLock(t, dir, "locks/local/staging/web.lock.yaml"); !in.Tombstone() {
		t.Errorf("staging/web is not tombstoned")
	}
}

// TestPlanFailsOnAHandEditedLockfile: a pull request whose lockfile was
// edited by hand fails its plan, as the lock after the merge would.
func TestPlanFailsOnAHandEditedLockfile(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	p := filepath.Join(dir, "locks/local/dev/web.lock.yaml")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), "replicas: 2", "replicas: 9", 1)
	if edited == string(data) {
		t.Fatal("the lockfile has no replicas: 2 to edit")
	}
	writeRepoFile(t, dir, "locks/local/dev/web.lock.yaml", edited)
	for _, args := range [][]string{{"plan"}, {"lock", "--check"}, {"lock"}} {
		out, code, err := styrminctl(t, append([]string{"--repo", dir}, args...)...)
		if code != 1 || err == nil || !strings.Contains(err.Error(), "locks/local/dev/web.lock.yaml: lockfile was edited by hand") {
			t.Errorf("%v: exit %d, %v\n%s; want 1 naming the lockfile", args, code, err, out)
		}
	}
}

// TestRetryInASubfolderNumbersAfterTheHighestSequence: retry --commit
// writes the sub-folder's lockfile and, like every lock path, numbers
// after the highest sequence the history used.
func TestRetryInASubfolderNumbersAfterTheHighestSequence(t *testing.T) {
	t.Parallel()
	root, dir := subfolderRepo(t)
	if _, code, err := styrminctl(t, "--repo", dir, "lock", "--commit"); code != 0 {
		t.Fatal(err)
	}
	if _, code, err := styrminctl(t, "--repo", dir, "retry", "local/dev/web", "--commit"); code != 0 {
		t.Fatal(err)
	}
	const webLock = "locks/local/dev/web.lock.yaml"
	if in := readLock(t, dir, webLock); in.Sequence != 2 {
		t.Fatalf("web at %d after a retry, want 2", in.Sequence)
	}
	// Restore the first lock by hand: the retry still comes after 2.
	planGit(t, root, "checkout", "-q", "HEAD~1", "--", "deploy/"+webLock)
	planGit(t, root, "commit", "-q", "-m", "restore web's first lock")
	for _, args := range [][]string{{"retry", "local/dev/web"}, {"retry", "local/dev/web", "--commit"}} {
		out, code, err := styrminctl(t, append([]string{"--repo", dir}, args...)...)
		if code != 0 {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if in := readLock(t, dir, webLock); in.Sequence != 3 {
			t.Errorf("%v: web at %d, want 3", args, in.Sequence)
		}
		planGit(t, root, "checkout", "-q", "--", ".")
	}
	if files := planGit(t, root, "show", "--name-only", "--format=", "HEAD"); files != "deploy/"+webLock {
		t.Errorf("the retry commit changed %q", files)
	}
}

// TestARetryCommitBetweenUnlockedUpgradesKeepsOneLockPerUpgrade: a
// `retry --commit` made while configuration commits wait for their lock
// (after both upgrades, or between them) locks no configuration, so the
// next lock still gives each upgrade its own instance: hub 1.5.0, whose
// upgrade hook must run, is not merged into 1.6.0.
func TestARetryCommitBetweenUnlockedUpgradesKeepsOneLockPerUpgrade(t *testing.T) {
	t.Parallel()
	const hubLock = "locks/local/dev/hub.lock.yaml"
	for _, between := range []bool{false, true} {
		name := "after both upgrades"
		if between {
			name = "between the upgrades"
		}
		t.Run(name, func(t *testing.T) {
			dir := lockedGitRepo(t)
			retry := func() {
				t.Helper()
				if out, code, err := styrminctl(t, "--repo", dir, "retry", "local/dev/web", "--commit"); code != 0 {
					t.Fatalf("retry --commit: exit %d, %v\n%s", code, err, out)
				}
			}
			writeRepoFile(t, dir, devHubFile, hubAt("1.5.0"))
			planGit(t, dir, "commit", "-q", "-am", "hub 1.5.0")
			first := planGit(t, dir, "rev-parse", "HEAD")
			if between {
				retry()
			}
			writeRepoFile(t, dir, devHubFile, hubAt("1.6.0"))
			planGit(t, dir, "commit", "-q", "-am", "hub 1.6.0")
			second := planGit(t, dir, "rev-parse", "HEAD")
			if !between {
				retry()
			}
			if in := readLock(t, dir, "locks/local/dev/web.lock.yaml"); in.Sequence != 2 {
				t.Fatalf("web after the retry at %d, want 2", in.Sequence)
			}

			out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit")
			if code != 0 {
				t.Fatalf("lock --commit: exit %d, %v\n%s", code, err, out)
			}
			for _, tc := range []struct {
				rev, config, app string
				seq              int64
			}{{"HEAD~1", first, "1.5.0", 2}, {"HEAD", second, "1.6.0", 3}} {
				in := lockAtCommit(t, dir, tc.rev, hubLock)
				if in.Sequence != tc.seq || in.AppVersion != tc.app || in.SourceCommit != tc.config {
					t.Errorf("%s: hub lock is sequence %d, app %s, source %s; want %d, %s, %s\n%s", tc.rev, in.Sequence, in.AppVersion, in.SourceCommit, tc.seq, tc.app, tc.config, out)
				}
			}
			// The retried instance stays as the retry locked it.
			if in := readLock(t, dir, "locks/local/dev/web.lock.yaml"); in.Sequence != 2 {
				t.Errorf("web after the lock at %d, want the retry's 2", in.Sequence)
			}
			if out, code, _ := styrminctl(t, "--repo", dir, "lock", "--commit"); code != 0 || !strings.Contains(out, "nothing to lock") {
				t.Errorf("second lock: exit %d\n%s", code, out)
			}
		})
	}
}

// TestASequenceCommittedByHandIsNotReusedAfterItsLockfileIsDeleted: a
// lockfile committed with a plain `git commit` after `styrminctl lock`
// (what `lock --check` tells people to do: no trailers), then deleted, or
// restored to an older content, still counts: the next lock numbers after
// it.
func TestASequenceCommittedByHandIsNotReusedAfterItsLockfileIsDeleted(t *testing.T) {
	t.Parallel()
	const webLock = "locks/local/dev/web.lock.yaml"
	for _, restore := range []bool{false, true} {
		name := "deleted"
		if restore {
			name = "restored to an older content"
		}
		t.Run(name, func(t *testing.T) {
			dir := lockedGitRepo(t)
			writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
			if out, code, err := styrminctl(t, "--repo", dir, "lock"); code != 0 {
				t.Fatalf("lock: exit %d, %v\n%s", code, err, out)
			}
			planGit(t, dir, "commit", "-q", "-am", "web 3 replicas, locked")
			if in := readLock(t, dir, webLock); in.Sequence != 2 {
				t.Fatalf("web at %d, want 2", in.Sequence)
			}
			if restore {
				planGit(t, dir, "checkout", "-q", "HEAD~1", "--", webLock) // sequence 1
				planGit(t, dir, "commit", "-q", "-m", "restore web's old lockfile")
			} else {
				planGit(t, dir, "rm", "-q", webLock)
				planGit(t, dir, "commit", "-q", "-m", "delete web's lockfile")
			}
			writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 4\n")
			planGit(t, dir, "commit", "-q", "-am", "web 4 replicas")
			out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit")
			if code != 0 {
				t.Fatalf("lock --commit: exit %d, %v\n%s", code, err, out)
			}
			if in := readLock(t, dir, webLock); in.Sequence != 3 {
				t.Errorf("web at %d, want 3 (after the 2 committed by hand)\n%s", in.Sequence, out)
			}
		})
	}
}

// TestARevertedChangeIsLockedPastTheSequenceItUsed pins a revert: web's
// change (3 replicas) is locked at 2 and committed with its lockfile, and
// then reverted (git revert, as a pull request's "Revert" does): the
// configuration and the lockfile at 1 are back, their digests equal. The
// agent ran 2 and never applies 1 again, so the lock must not take the
// lockfile as up to date: lock --check reports a change, and lock
// --commit locks the reverted content at 3, past the sequence used.
func TestARevertedChangeIsLockedPastTheSequenceItUsed(t *testing.T) {
	t.Parallel()
	const webLock = "locks/local/dev/web.lock.yaml"
	dir := lockedGitRepo(t)
	first := readLock(t, dir, webLock)
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	if out, code, err := styrminctl(t, "--repo", dir, "lock"); code != 0 {
		t.Fatalf("lock: exit %d, %v\n%s", code, err, out)
	}
	planGit(t, dir, "commit", "-q", "-am", "web 3 replicas, locked")
	if in := readLock(t, dir, webLock); in.Sequence != 2 {
		t.Fatalf("web at %d, want 2", in.Sequence)
	}
	planGit(t, dir, "revert", "--no-edit", "HEAD")
	if in := readLock(t, dir, webLock); in.Sequence != 1 || in.Digest != first.Digest {
		t.Fatalf("after the revert web's lockfile is at %d (%s); want 1 (%s)", in.Sequence, in.Digest, first.Digest)
	}
	if out, code, _ := styrminctl(t, "--repo", dir, "lock", "--check"); code != 2 {
		t.Fatalf("lock --check after the revert: exit %d; want 2 (web's lock is behind the sequence it used)\n%s", code, out)
	}
	// The plan shows what the lock will do: web locked again, at 3.
	if out, code, err := styrminctl(t, "--repo", dir, "plan", "--base", "HEAD", "--detailed-exitcode", "-o", "json"); code != 2 || !strings.Contains(out, `"toSequence": 3`) {
		t.Fatalf("plan after the revert: exit %d, %v; want 2 and web to sequence 3\n%s", code, err, out)
	}
	out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit")
	if code != 0 {
		t.Fatalf("lock --commit: exit %d, %v\n%s", code, err, out)
	}
	in := readLock(t, dir, webLock)
	if in.Sequence != 3 || in.Digest != first.Digest {
		t.Errorf("web at %d (%s); want the reverted content (%s) at 3\n%s", in.Sequence, in.Digest, first.Digest, out)
	}
	// And then it is current.
	if out, code, _ := styrminctl(t, "--repo", dir, "lock", "--check"); code != 0 {
		t.Errorf("lock --check after locking the revert: exit %d; want 0\n%s", code, out)
	}
}

// TestPlanSaysItSumsTheConfigurationCommitsLockRunsOneByOne: a plan of
// two unlocked upgrades showed one change (1.4.0 → 1.6.0) where `lock
// --commit` locks each and the agent runs both upgrades' hooks in turn.
// The plan says it sums them, in every format; one commit says nothing.
func TestPlanSaysItSumsTheConfigurationCommitsLockRunsOneByOne(t *testing.T) {
	t.Parallel()
	one := lockedGitRepo(t)
	writeRepoFile(t, one, devHubFile, hubAt("1.5.0"))
	planGit(t, one, "commit", "-q", "-am", "hub 1.5.0")
	out, _, _ := styrminctl(t, "--repo", one, "plan")
	if strings.Contains(out, "commits made since the last lock") {
		t.Errorf("one commit: the plan speaks of several:\n%s", out)
	}
	dir := lockedGitRepo(t)
	_, _ = twoUpgrades(t, dir)
	// Three commits, the README's among them (it changes no instance).
	const note = "this plan sums the 3 commits made since the last lock. `styrminctl lock --commit` locks each one that changes an instance as its own instance"
	for _, tc := range []struct{ format, want string }{
		{"text", "Note: " + note},
		{"markdown", "> [!NOTE]\n> Note: " + note},
		{"json", `"unlockedCommits": 3`},
	} {
		out, code, err := styrminctl(t, "--repo", dir, "plan", "-o", tc.format)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("plan -o %s: exit %d, %v; want %q in:\n%s", tc.format, code, err, tc.want, out)
		}
	}
}

// TestLockPushToABranchWithoutTheRepositoryFailsNamingIt: a lock on a
// branch that does not exist (the local branch's name where it tracks
// another, a typo) or whose tree holds no desired-state repository in
// --repo's folder fails naming the branch and folder, and commits and
// pushes nothing. An empty tree would otherwise lock nothing, reported as
// "nothing to lock" with exit 0: CI's lock step passing for ever.
func TestLockPushToABranchWithoutTheRepositoryFailsNamingIt(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t) // on feature, tracking origin/main
	// An orphan branch holding only a README, on the remote too.
	planGit(t, dir, "switch", "-q", "--orphan", "docs")
	writeRepoFile(t, dir, "README.md", "documentation\n")
	planGit(t, dir, "add", "README.md")
	planGit(t, dir, "commit", "-q", "-m", "docs")
	planGit(t, dir, "push", "-q", "origin", "docs")
	planGit(t, dir, "switch", "-q", "-f", "feature")
	// Something to lock, so "nothing to lock" would be false.
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 6\n")
	planGit(t, dir, "commit", "-q", "-am", "web 6 replicas")
	remote := planGit(t, dir, "ls-remote", "origin")
	local := planGit(t, dir, "show-ref")

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"lock", "--push"}, []string{"origin/feature does not exist", "the local branch feature tracks origin/main", "pass --branch main"}},
		{[]string{"retry", "local/dev/web", "--push"}, []string{"origin/feature does not exist", "pass --branch main"}},
		{[]string{"lock", "--push", "--branch", "nosuch"}, []string{"origin/nosuch does not exist"}},
		{[]string{"lock", "--commit", "--branch", "nosuch"}, []string{"no local branch nosuch"}},
		{[]string{"lock", "--push", "--branch", "docs"}, []string{"commit locks on origin/docs", "the root folder of its tree: not a desired-state repository"}},
		{[]string{"lock", "--commit", "--branch", "docs"}, []string{"commit locks on docs", "the root folder of its tree: not a desired-state repository"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := run(t, append([]string{"--repo", dir}, tc.args...)...)
			if code != 1 || strings.Contains(stdout, "nothing to lock") {
				t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	if after := planGit(t, dir, "ls-remote", "origin"); after != remote {
		t.Errorf("the remote changed:\n%s\nwas:\n%s", after, remote)
	}
	if after := planGit(t, dir, "show-ref"); after != local {
		t.Errorf("the local refs changed:\n%s\nwere:\n%s", after, local)
	}

	t.Run("a branch without the sub-folder", func(t *testing.T) {
		root, sub := subfolderRepo(t)
		planGit(t, root, "switch", "-q", "--orphan", "docs")
		writeRepoFile(t, root, "README.md", "documentation\n")
		planGit(t, root, "add", "README.md")
		planGit(t, root, "commit", "-q", "-m", "docs")
		planGit(t, root, "switch", "-q", "-f", "main")
		docs := planGit(t, root, "rev-parse", "docs")
		_, stderr, code := run(t, "--repo", sub, "lock", "--commit", "--branch", "docs")
		if code != 1 || !strings.Contains(stderr, "commit locks on docs") || !strings.Contains(stderr, "folder deploy/ of its tree: not a desired-state repository") {
			t.Errorf("exit %d, stderr:\n%s", code, stderr)
		}
		if after := planGit(t, root, "rev-parse", "docs"); after != docs {
			t.Errorf("docs moved from %s to %s", docs, after)
		}
	})
}

// TestAPlanOfCommitsThatCancelOutStillSaysTheUpgradesLockWillRun: web
// bumped to 1.26.0 and back in two commits sums to no change, and the plan
// said "No changes", --detailed-exitcode 0 and lock --check "up to date";
// lock --commit then locked both, and the agent ran an upgrade to 1.26.0
// (its migration hooks) and one back. The plan names the lock commits and
// each upgrade, in every format, and both checks say something is to lock.
func TestAPlanOfCommitsThatCancelOutStillSaysTheUpgradesLockWillRun(t *testing.T) {
	t.Parallel()
	dir := lockedGitRepo(t)
	web, err := os.ReadFile(filepath.Join(dir, devWebFile))
	if err != nil {
		t.Fatal(err)
	}
	writeRepoFile(t, dir, devWebFile, strings.Replace(string(web), "1.25.0", "1.26.0", 1))
	planGit(t, dir, "commit", "-q", "-am", "bump web")
	bump := planGit(t, dir, "rev-parse", "--short=12", "HEAD")
	writeRepoFile(t, dir, devWebFile, string(web))
	planGit(t, dir, "commit", "-q", "-am", "revert bump")
	revert := planGit(t, dir, "rev-parse", "--short=12", "HEAD")
	if out := planGit(t, dir, "diff", "HEAD~2", "--", devWebFile); out != "" {
		t.Fatalf("the two commits do not cancel out:\n%s", out)
	}

	for _, tc := range []struct {
		format string
		want   []string
	}{
		{"text", []string{"No net change", "2 lock commits", bump, revert, "local/dev/web", "upgrade", "1 → 2", "2 → 3", "1.25.0 → 1.26.0", "1.26.0 → 1.25.0", "Note: this plan sums the 2 commits"}},
		{"markdown", []string{"No net change", "2 lock commits", bump, revert, "`local/dev/web`", "upgrade", "1.25.0 → 1.26.0", "1.26.0 → 1.25.0", "> [!NOTE]"}},
		{"json", []string{`"unlockedCommits": 2`, `"lockCommits": [`, `"id": "local/dev/web"`, `"workflow": "upgrade"`, `"toSequence": 3`, `"subject": "revert bump"`}},
	} {
		out, code, err := styrminctl(t, "--repo", dir, "plan", "--detailed-exitcode", "-o", tc.format)
		if code != 2 {
			t.Errorf("plan --detailed-exitcode -o %s: exit %d, %v; want 2 (lock --commit locks two instances)\n%s", tc.format, code, err, out)
		}
		if strings.Contains(out, "No changes: every deployment matches") {
			t.Errorf("plan -o %s says no changes:\n%s", tc.format, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("plan -o %s: want %q in:\n%s", tc.format, w, out)
			}
		}
	}
	out, code, _ := styrminctl(t, "--repo", dir, "lock", "--check")
	if code != 2 || strings.Contains(out, "up to date") || !strings.Contains(out, "local/dev/web") {
		t.Errorf("lock --check: exit %d; want 2 naming web\n%s", code, out)
	}
	if out, code, err := styrminctl(t, "--repo", dir, "lock", "--commit"); code != 0 {
		t.Fatalf("lock --commit: exit %d, %v\n%s", code, err, out)
	}
	for rev, want := range map[string]int64{"HEAD~1": 2, "HEAD": 3} {
		if in := lockAtCommit(t, dir, rev, "locks/local/dev/web.lock.yaml"); in.Sequence != want {
			t.Errorf("web at %s is %d, want %d", rev, in.Sequence, want)
		}
	}
	if out, code, _ := styrminctl(t, "--repo", dir, "plan", "--detailed-exitcode"); code != 0 || !strings.Contains(out, "No changes") {
		t.Errorf("plan once locked: exit %d; want 0, no changes\n%s", code, out)
	}
}
