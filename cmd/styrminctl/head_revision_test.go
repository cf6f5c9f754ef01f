package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestPlanOfARevisionNumbersAfterTheSequencesItsHistoryUsed pins that
// plan --head REV counts the sequences REV's history used, as plan of the
// working tree and lock do: a change locked and then reverted with its
// lock leaves web's lockfile at 1 while the branch used 2, so every one
// of them locks web again as 3 (the agent runs 2's content), and plan
// --head of that same commit is no "No changes".
func TestPlanOfARevisionNumbersAfterTheSequencesItsHistoryUsed(t *testing.T) {
	t.Parallel()
	dir := upgradeGitRepo(t)
	writeRepoFile(t, dir, devWebFile, "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	planGit(t, dir, "commit", "-q", "-am", "three replicas")
	mustRun(t, "--repo", dir, "lock", "--commit")
	planGit(t, dir, "revert", "--no-edit", "HEAD", "HEAD~1")

	// The numbering a plan prints for web: its sequence from and to.
	seqRE := regexp.MustCompile(`local/dev/web[^\n]*?(\d+) → (\d+)`)
	for _, args := range [][]string{
		{"plan", "--detailed-exitcode"},
		{"plan", "--base", "HEAD", "--head", "HEAD", "--detailed-exitcode"},
	} {
		out, code, err := styrminctl(t, append([]string{"--repo", dir}, args...)...)
		if code != 2 {
			t.Errorf("%s: exit %d (%v), want 2: web's lockfile is behind the sequence its history used\n%s", strings.Join(args, " "), code, err, out)
			continue
		}
		m := seqRE.FindStringSubmatch(out)
		if m == nil || m[1] != "1" || m[2] != "3" {
			t.Errorf("%s: web numbered %v, want 1 → 3\n%s", strings.Join(args, " "), m, out)
		}
	}
	out, code, err := styrminctl(t, "--repo", dir, "lock", "--check")
	if code != 2 || !strings.Contains(out, "locks/local/dev/web.lock.yaml (sequence 1 → 3)") {
		t.Errorf("lock --check: exit %d (%v), want 2 with web's lockfile stale, 1 → 3\n%s", code, err, out)
	}
}
