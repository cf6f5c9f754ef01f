package main

import (
	"strings"
	"sync"
	"testing"

	"github.com/styrmin/styrmin/gitsource/gitserver"
)

// TestTwoCIJobsOnDifferentCommitsLockEachChangeOnce races two
// `styrminctl lock --push` runs, as two CI jobs of one branch would run
// them, each in its own checkout of a different commit, against a real
// HTTP git server: both succeed, and the branch holds one lock commit per
// configuration commit, with sequences that follow each other and no
// number used twice, whichever job pushed first.
func TestTwoCIJobsOnDifferentCommitsLockEachChangeOnce(t *testing.T) {
	t.Parallel()
	srv := gitserver.New(t)
	url, _ := srv.CreateRepo("state.git")
	dir := upgradeGitRepo(t)
	planGit(t, dir, "push", "-q", url, "main")
	var jobs []string
	for _, version := range []string{"1.5.0", "1.6.0"} {
		writeRepoFile(t, dir, devHubFile, hubAt(version))
		planGit(t, dir, "commit", "-q", "-am", "hub "+version)
		planGit(t, dir, "push", "-q", url, "main")
		job := t.TempDir()
		planGit(t, job, "clone", "-q", url, ".")
		jobs = append(jobs, job)
	}

	outs := make([]string, len(jobs))
	codes := make([]int, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], codes[i], _ = styrminctl(t, "--repo", job, "lock", "--push", "--branch", "main", "--attempts", "20")
		}()
	}
	wg.Wait()
	for i := range jobs {
		if codes[i] != 0 {
			t.Errorf("job %d: lock --push exit %d\n%s", i, codes[i], outs[i])
		}
	}

	check := t.TempDir()
	planGit(t, check, "clone", "-q", url, ".")
	log := planGit(t, check, "log", "--first-parent", "--format=%s", "-4")
	if want := "styrmin: lock local/dev/hub=3\nstyrmin: lock local/dev/hub=2\nhub 1.6.0\nhub 1.5.0"; log != want {
		t.Fatalf("the branch's history:\n%s\nwant one lock per configuration commit:\n%s\njobs said:\n%s", log, want, strings.Join(outs, "\n--\n"))
	}
}

// TestALockPushWhoseAnswerWasLostNamesTheLockTheRemoteHoldsWhenRunAgain
// drops the answer of `styrminctl lock --push`'s push after the real HTTP
// git server stored it, the host away for the look after: the run fails.
// Run again once the host answers, it makes no second lock commit (no
// sequence taken again) and names the lock commit the remote holds.
func TestALockPushWhoseAnswerWasLostNamesTheLockTheRemoteHoldsWhenRunAgain(t *testing.T) {
	t.Parallel()
	srv := gitserver.New(t)
	url, _ := srv.CreateRepo("state.git")
	dir := upgradeGitRepo(t)
	planGit(t, dir, "push", "-q", url, "main")
	writeRepoFile(t, dir, devHubFile, hubAt("1.5.0"))
	planGit(t, dir, "commit", "-q", "-am", "hub 1.5.0")
	planGit(t, dir, "push", "-q", url, "main")
	job := t.TempDir()
	planGit(t, job, "clone", "-q", url, ".")

	srv.LosePushAnswer()
	out, code, err := styrminctl(t, "--repo", job, "lock", "--push", "--branch", "main")
	if code == 0 || err == nil || !strings.Contains(err.Error(), "is unknown") {
		t.Fatalf("lock --push whose answer was lost, the host away after: exit %d, %v; want a failure saying whether the remote took the commit is unknown\n%s", code, err, out)
	}
	srv.Start()
	lock := srv.Head("state.git", "main")
	out, code, _ = styrminctl(t, "--repo", job, "lock", "--push", "--branch", "main")
	if code != 0 {
		t.Fatalf("lock --push run again: exit %d\n%s", code, out)
	}
	if head := srv.Head("state.git", "main"); head != lock {
		t.Fatalf("run again, lock --push moved the branch from %s to %s: a second lock commit", lock, head)
	}
	if !strings.Contains(out, lock[:12]) {
		t.Fatalf("run again, lock --push does not name the lock commit the remote holds (%s):\n%s", lock[:12], out)
	}
}
