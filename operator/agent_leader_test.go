package operator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestTwoReplicasWithLeaderElectionLockEachChangeOnce runs two agent
// replicas in lock mode with --leader-elect: only the elected one locks
// and syncs, each configuration change gets one lock commit, and when the
// leader stops the other takes over and locks the next change.
func TestTwoReplicasWithLeaderElectionLockEachChangeOnce(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	flags := []string{"--leader-elect", "--lock-mode"}
	replicas := []*agenttest.Proc{
		agenttest.StartAgent(t, e.bin, e.agentArgs(flags...)...),
		agenttest.StartAgent(t, e.bin, e.agentArgs(flags...)...),
	}
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", 1))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	if n := e.lockCommits(t); n != 1 {
		t.Fatalf("the first configuration made %d lock commits, want 1", n)
	}
	leader := e.onlyLocker(t, replicas)

	e.commitConfig(t, "hub: three workers", hubConfig("1.4.0", 3, "info"))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 2))
	if n := e.lockCommits(t); n != 2 {
		t.Fatalf("after one change: %d lock commits, want 2", n)
	}
	if got := e.onlyLocker(t, replicas); got != leader {
		t.Fatalf("replica %d locked, but replica %d leads", got, leader)
	}

	// The leader stops (releasing its lease): the other replica takes
	// over and locks the next change, once.
	replicas[leader].Stop()
	e.agent = replicas[1-leader]
	e.commitConfig(t, "hub: four workers", hubConfig("1.4.0", 4, "info"))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 3))
	if n := e.lockCommits(t); n != 3 {
		t.Fatalf("after the failover and a change: %d lock commits, want 3", n)
	}
	if replicas[1-leader].Logged(isLockModeStart) != 1 {
		t.Fatal("the replica left did not start its locker once after taking over")
	}
	// The new leader's lock says so on the StyrminSource (written after
	// the lock, and on a later round should the sync's writes have
	// conflicted with it every time).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		src, err := e.source(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		c := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionLocked)
		if c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "every deployment locked") && strings.Contains(c.Message, "1 deployment locked in ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the StyrminSource's Locked condition after the new leader's lock: %+v", c)
		}
	}
}

func isLockModeStart(l agenttest.LogEntry) bool { return l.Str("msg") == "lock mode started" }

// onlyLocker returns the index of the one replica whose locker started;
// none or both fails the test.
func (e *agentEnv) onlyLocker(t *testing.T, replicas []*agenttest.Proc) int {
	t.Helper()
	leader := -1
	for i, p := range replicas {
		switch n := p.Logged(isLockModeStart); {
		case n == 0:
		case n > 1 || leader >= 0:
			t.Fatalf("lockers started: replica %d %d times, and replica %d before: only the leader may lock", i, n, leader)
		default:
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no replica started its locker")
	}
	return leader
}

// lockCommits counts the commits of the branch that lock deployments.
func (e *agentEnv) lockCommits(t *testing.T) int {
	t.Helper()
	fr, err := e.clone.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	changes, err := e.clone.LockChanges(gitsource.Hash{}, fr.Head, "locks")
	if err != nil {
		t.Fatal(err)
	}
	commits := map[gitsource.Hash]bool{}
	for _, c := range changes {
		if len(c.Locks) > 0 {
			commits[c.Commit] = true
		}
	}
	return len(commits)
}
