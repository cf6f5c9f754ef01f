package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

var pushedLine = regexp.MustCompile(`(?m)^pushed ([0-9a-f]{40}) `)

// hubWithWorkers is dev/hub's file with the given worker count.
func hubWithWorkers(t *testing.T, workers int) map[string][]byte {
	t.Helper()
	b := strings.Replace(string(readExample(t, devHubFile)), "workers: 2", fmt.Sprintf("workers: %d", workers), 1)
	return map[string][]byte{devHubFile: []byte(b)}
}

// TestChangesOneAfterAnotherAndConcurrentLockers locks three changes to
// dev/hub one after another without waiting for the agent, then has two
// `styrminctl lock --push` processes from two clones lock at the same
// time, twice: the sequences are never assigned twice, the deployment ends
// at the last locked instance, and every earlier task is Succeeded or
// Superseded.
func TestChangesOneAfterAnotherAndConcurrentLockers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clone1, clone2 := e.newClone(t), e.newClone(t)
	e.deployAll(t, clone1)

	// One after another, as fast as people push.
	want := int64(1)
	for _, workers := range []int{3, 4, 5} {
		e.git.Commit(repoName, fmt.Sprintf("hub: %d workers", workers), hubWithWorkers(t, workers))
		locked, out := e.lockPush(t, clone1)
		want++
		if len(locked) != 1 || locked["local/dev/hub"] != want {
			t.Fatalf("locked %v, want local/dev/hub=%d:\n%s", locked, want, out)
		}
	}

	// At the same time: two lockers on each of two new heads.
	for _, workers := range []int{6, 7} {
		e.git.Commit(repoName, fmt.Sprintf("hub: %d workers", workers), hubWithWorkers(t, workers))
		var wg sync.WaitGroup
		results := make([]map[string]int64, 2)
		outs := make([]string, 2)
		errs := make([]error, 2)
		for i, clone := range []string{clone1, clone2} {
			wg.Go(func() { results[i], outs[i], errs[i] = e.lockPushErr(clone) })
		}
		wg.Wait()
		// Sequences pushed, by lock commit. Two lockers that resolve the
		// same head build the same commit (lock commits are deterministic),
		// so both may report pushing it; what must hold is that one commit
		// carries the one new sequence.
		pushed := map[string]int64{}
		for i := range 2 {
			if errs[i] != nil {
				t.Fatalf("locker %d: %v\n%s", i+1, errs[i], outs[i])
			}
			if s, ok := results[i]["local/dev/hub"]; ok {
				m := pushedLine.FindStringSubmatch(outs[i])
				if m == nil {
					t.Fatalf("locker %d locked without saying what it pushed:\n%s", i+1, outs[i])
				}
				if prev, dup := pushed[m[1]]; dup && prev != s {
					t.Fatalf("commit %s reported with sequences %d and %d", m[1], prev, s)
				}
				pushed[m[1]] = s
			}
		}
		want++
		if len(pushed) != 1 {
			t.Fatalf("concurrent lockers pushed %v, want one lock commit with local/dev/hub=%d:\n1: %s\n2: %s", pushed, want, outs[0], outs[1])
		}
		for _, s := range pushed {
			if s != want {
				t.Fatalf("concurrent lockers locked local/dev/hub=%d, want %d", s, want)
			}
		}
		t.Logf("concurrent lockers at %d workers:\n1: %s2: %s", workers, outs[0], outs[1])
	}

	// Every task ends; the deployment runs the last locked instance.
	phases := map[v1alpha1.TaskPhase]int{}
	for seq := int64(2); seq <= want; seq++ {
		task := e.waitTask(t, "dev-hub", "hub", seq)
		phases[task.Status.Phase]++
		switch {
		case seq == want:
			requirePhase(t, task, v1alpha1.TaskSucceeded)
		case task.Status.Phase != v1alpha1.TaskSucceeded && task.Status.Phase != v1alpha1.TaskSuperseded:
			t.Errorf("hub-%d: %s (%s), want Succeeded or Superseded", seq, task.Status.Phase, task.Status.Message)
		}
	}
	t.Logf("dev/hub tasks 2..%d by phase: %v", want, phases)
	e.waitSynced(t)
	sd := e.deployment(t, "dev-hub")
	if sd.Spec.Sequence != want || sd.Status.ActiveSequence != want || !strings.Contains(string(sd.Spec.Values.Raw), `"worker":{"replicas":7}`) {
		t.Errorf("dev/hub: spec %d active %d, want the last locked instance %d (7 workers)", sd.Spec.Sequence, sd.Status.ActiveSequence, want)
	}
	if got := len(e.tasks(t, "dev-hub")); int64(got) != want {
		t.Errorf("dev-hub has %d tasks, want %d (one per sequence)", got, want)
	}
}
