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
