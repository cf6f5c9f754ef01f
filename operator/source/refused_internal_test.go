package source

import (
	"fmt"
	"testing"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

func refusalsOf(commit string, n int) []v1alpha1.RefusedLock {
	out := make([]v1alpha1.RefusedLock, n)
	for i := range out {
		out[i] = v1alpha1.RefusedLock{Commit: commit, Path: fmt.Sprintf("locks/local/dev/d%03d.lock.yaml", i)}
	}
	return out
}

// TestOneCommitsManyRefusalsPushOutNoOtherCommits: a lock commit whose
// fan-out is refused whole keeps a few of its refusals, and every other
// commit keeps its own: each commit's status on the git host needs one to
// fail. Past the bound, the refusals beyond a commit's first go before a
// commit's only one, and then the oldest commits'.
func TestOneCommitsManyRefusalsPushOutNoOtherCommits(t *testing.T) {
	var have []v1alpha1.RefusedLock
	for i := range 30 {
		have = withRefused(have, refusalsOf(fmt.Sprintf("c%02d", i), 1))
	}
	have = withRefused(have, refusalsOf("fanout", 500))
	commits := map[string]int{}
	for _, r := range have {
		commits[r.Commit]++
	}
	if len(have) != v1alpha1.MaxRefusedLocks || len(commits) != 31 || commits["fanout"] != 2 {
		t.Fatalf("%d refusals of %d commits (%d of the fan-out's); want %d, every one of the 31 commits kept, 2 of the fan-out's",
			len(have), len(commits), commits["fanout"], v1alpha1.MaxRefusedLocks)
	}
	// The same again: nothing added, nothing dropped.
	if again := withRefused(have, refusalsOf("fanout", 500)); len(again) != len(have) {
		t.Fatalf("meeting the fan-out again left %d refusals, want %d", len(again), len(have))
	}
	// More commits than the bound: the newest are kept, one each.
	for i := 30; i < 40; i++ {
		have = withRefused(have, refusalsOf(fmt.Sprintf("c%02d", i), 2))
	}
	clear(commits)
	for _, r := range have {
		commits[r.Commit]++
	}
	if len(have) != v1alpha1.MaxRefusedLocks || len(commits) != v1alpha1.MaxRefusedLocks || commits["c00"] != 0 || commits["c39"] != 1 || have[len(have)-1].Commit != "c39" {
		t.Fatalf("%d refusals of %d commits, c00's %d, c39's %d; want the newest %d commits, one each", len(have), len(commits), commits["c00"], commits["c39"], v1alpha1.MaxRefusedLocks)
	}
}
