package operator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// The fault tests: the agent binary against the real control plane and git
// server while one of them fails. Each asserts the same three things: no
// task is lost (one task per locked sequence, each ended), no step ran
// twice (every finished step in one attempt, every Job once) and the
// cluster ends at the last lock.

// apiOutage and gitOutage are how long the faults last.
const (
	apiOutage = 30 * time.Second
	gitOutage = 60 * time.Second
)

// TestAgentRidesOutAnAPIServerRestartDuringATask stops kube-apiserver for
// 30 s while an upgrade task runs its migration step and starts it again
// on the same port and etcd data, with the agent as it ships (leader
// election on): the migration Job is created once, every task ends
// Succeeded, the next change after the restart is synced and run, and the
// deployment ends at it.
//
// An outage longer than the lease's renew deadline (30 s) ends the agent
// with "leader election lost": controller-runtime exits when it cannot
// renew, so two replicas never both act. The test then starts it again,
// as the Deployment's restart policy would, and the new process resumes
// the task at the step that was running (counting it a second attempt of
// that step, whose effect, the Job, it finds and does not repeat). Most
// of the time after the restart is the control plane's own: the
// controller manager, scheduler and kwok watch again within their
// back-off, and only then does the migration Job's pod run.
func TestAgentRidesOutAnAPIServerRestartDuringATask(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	agent := e.startAgent(t, "--debug-step-pause=1s")
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", 1))

	upgrade := e.change(t, "hub", "hub: app 1.4.1", hubConfig("1.4.1", 2, "info"))
	task := v1alpha1.TaskName("hub", upgrade)
	agent.WaitLog(t, agentWaitLimit, "the migration step of "+task+" to start", func(l agenttest.LogEntry) bool {
		return l.Str("msg") == "step started" && l.Str("task") == task && l.Num("index") == 1
	})
	start := time.Now()
	if err := e.cluster.RestartAPIServer(apiOutage); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver down at %s and back at %s", start.Format(time.TimeOnly), time.Now().Format(time.TimeOnly))
	resumed := ""
	select {
	case <-agent.Done():
		if !strings.Contains(agent.Log(), "leader election lost") {
			t.Fatalf("the agent ended (%s) without losing its lease:\n%s", agent.ExitState(), agent.Log())
		}
		t.Logf("the agent ended (%s): leader election lost; started again", agent.ExitState())
		e.startAgent(t, "--debug-step-pause=1s")
		resumed = task
	case <-time.After(20 * time.Second):
		t.Log("the agent kept its lease through the outage")
	}
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", upgrade))
	t.Logf("%s ended %s after the API server was stopped", task, time.Since(start).Round(time.Second))

	last := e.change(t, "hub", "hub: three workers", hubConfig("1.4.1", 3, "info"))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", last))
	e.requireFaultFreeResumed(t, resumed, hubNamespace, "hub", []int64{1, upgrade, last}, "hub-init-db-1", fmt.Sprintf("hub-migrate-%d", upgrade))
	if got := e.workerReplicas(t); got != 3 {
		t.Errorf("hub-worker replicas %d, want 3 (the last change)", got)
	}
}

// TestAgentCatchesUpAfterTheGitServerWasDown makes the git server answer
// 503 for 60 s: the agent reports the failed fetch on its StyrminSource
// and keeps running; changes pushed once the server is back are synced
// and run in order.
func TestAgentCatchesUpAfterTheGitServerWasDown(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", 1))

	e.git.Stop()
	down := time.Now()
	e.waitSourceReady(t, "to report the failed fetch", func(ready, _ *metav1.Condition) bool {
		return ready.Status == metav1.ConditionFalse && ready.Reason == v1alpha1.ReasonFetchFailed
	})
	time.Sleep(time.Until(down.Add(gitOutage)))
	e.git.Start()
	if e.git.Refused() == 0 {
		t.Fatal("the agent made no request while the git server was down")
	}
	t.Logf("%d requests refused in %s", e.git.Refused(), time.Since(down).Round(time.Second))

	second := e.change(t, "hub", "hub: three workers", hubConfig("1.4.0", 3, "info"))
	last := e.change(t, "hub", "hub: app 1.4.1", hubConfig("1.4.1", 3, "info"))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", last))
	e.requireFaultFree(t, hubNamespace, "hub", []int64{1, second, last}, "hub-init-db-1", fmt.Sprintf("hub-migrate-%d", last))
	src, err := e.source(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ready := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("StyrminSource Ready after the outage: %+v", ready)
	}
}

// TestATokenRotatedInItsSecretIsUsedWithoutARestart: the host takes only
// a new token (an installation token expired, a personal token replaced),
// and whatever renews it writes it into the agent's Secret a moment
// later. The agent read the Secret once at start, so its source stayed
// AuthenticationFailed, and no change ran, until it was restarted. It
// reads the Secret again (--credentials-interval) and fetches with what
// it holds now.
func TestATokenRotatedInItsSecretIsUsedWithoutARestart(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	e.startAgent(t, "--credentials-interval=500ms")
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))

	const rotated = "rotated-token-not-a-secret"
	e.git.SetToken(rotated)
	if err := e.clone.SetAuth(gitsource.Auth{Token: rotated}); err != nil {
		t.Fatal(err)
	}
	e.waitSourceReady(t, "to report the refused token", func(ready, _ *metav1.Condition) bool {
		return ready.Reason == v1alpha1.ReasonAuthenticationFailed
	})
	var sec corev1.Secret
	ctx := context.Background()
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: config.AgentNamespace, Name: agentSecret}, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[operator.SecretKeyToken] = []byte(rotated)
	if err := e.c.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	second := e.change(t, "hub", "hub: three workers", hubConfig("1.4.0", 3, "info"))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", second))
	e.waitSourceReady(t, "to be Ready again", func(ready, stalled *metav1.Condition) bool {
		return ready.Status == metav1.ConditionTrue && (stalled == nil || stalled.Status != metav1.ConditionTrue)
	})
	if logs := e.agent.Log(); strings.Contains(logs, rotated) || strings.Contains(logs, agentGitToken) {
		t.Error("the agent's log holds a token")
	}
}

// waitSourceReady waits (15 s) until the StyrminSource's Ready condition,
// and its Stalled one (nil: none), are as done says.
func (e *agentEnv) waitSourceReady(t *testing.T, what string, done func(ready, stalled *metav1.Condition) bool) {
	t.Helper()
	agenttest.WaitUntil(t, 15*time.Second, "the StyrminSource "+what, func(ctx context.Context) (bool, string, error) {
		src, err := e.source(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		ready := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionReady)
		if ready == nil {
			return false, "no Ready condition", nil
		}
		return done(ready, apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionStalled)), ready.Reason + ": " + ready.Message, nil
	})
}

// TestAgentFollowsAForcePushWithoutReusingASequence rewinds the branch
// with a force push after hub ran sequence 2. The rewound branch's CI
// locks the next change of hub as 2 again, from its own history: the agent
// reports the rewrite (event and condition HistoryRewritten naming hub),
// runs nothing for it and keeps hub where it is. The next lock, numbered
// after what the cluster ran (as the lock mode numbers), runs, the
// condition goes, and hub ends at it.
func TestAgentFollowsAForcePushWithoutReusingASequence(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	firstLock := e.git.Head(agentRepoName, "main")
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	ran := e.change(t, "hub", "hub: three workers", hubConfig("1.4.0", 3, "info"))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", ran))

	e.git.Reset(agentRepoName, "main", firstLock)
	if reused := e.change(t, "hub", "hub: four workers", hubConfig("1.4.0", 4, "info")); reused != ran {
		t.Fatalf("the rewound branch locked hub at %d, want %d again (its history forgot %d)", reused, ran, ran)
	}
	agenttest.WaitUntil(t, 30*time.Second, "the HistoryRewritten condition naming hub", func(ctx context.Context) (bool, string, error) {
		src, err := e.source(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionHistoryRewritten)
		if c == nil {
			return false, "no condition", nil
		}
		return c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonSequenceUsed && strings.Contains(c.Message, "local/dev/hub (the branch locks 2, the cluster ran 2"), c.Message, nil
	})
	waitSourceEvent(t, e.c, v1alpha1.ReasonHistoryRewritten, "does not descend")
	if sd := e.deployment(t, hubNamespace); sd.Spec.Sequence != ran || e.workerReplicas(t) != 3 {
		t.Fatalf("hub at sequence %d with %d workers, want %d with 3: a reused sequence was applied", sd.Spec.Sequence, e.workerReplicas(t), ran)
	}

	used, err := operator.UsedSequences(context.Background(), e.c)
	if err != nil {
		t.Fatal(err)
	}
	e.commitConfig(t, "hub: five workers", hubConfig("1.4.0", 5, "info"))
	last := ran + 1
	e.git.Commit(agentRepoName, fmt.Sprintf("styrmin: lock local/dev/hub=%d\n\nStyrmin-Lock: local/dev/hub=%d", last, last), lockFiles(t, e.clone, used))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", last))
	e.requireFaultFree(t, hubNamespace, "hub", []int64{1, ran, last}, "hub-init-db-1")
	if got := e.workerReplicas(t); got != 5 {
		t.Errorf("hub-worker replicas %d, want 5 (the last lock)", got)
	}
	agenttest.WaitUntil(t, 10*time.Second, "the HistoryRewritten condition to go", func(ctx context.Context) (bool, string, error) {
		src, err := e.source(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionHistoryRewritten)
		return c == nil, fmt.Sprint(c), nil
	})
}

// TestTwoAgentsForOneClusterRunEachStepOnce starts two agents with their
// default flags (leader election on) for one cluster: one holds the lease
// and runs every step, each once, and the other runs none.
func TestTwoAgentsForOneClusterRunEachStepOnce(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	agents := []*agenttest.Proc{e.startAgent(t), e.startAgent(t)}
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", 1))
	last := e.change(t, "hub", "hub: app 1.4.1", hubConfig("1.4.1", 2, "info"))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", last))
	e.requireFaultFree(t, hubNamespace, "hub", []int64{1, last}, "hub-init-db-1", fmt.Sprintf("hub-migrate-%d", last))

	stepsStarted := func(l agenttest.LogEntry) bool { return l.Str("msg") == "step started" }
	var ran []int
	for i, a := range agents {
		if n := a.Logged(stepsStarted); n > 0 {
			ran = append(ran, i)
			t.Logf("agent %d (pid %d) started %d steps", i, a.Pid(), n)
		}
	}
	if len(ran) != 1 {
		t.Fatalf("agents %v started steps, want exactly one (the lease holder)", ran)
	}
	var lease coordinationv1.Lease
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: config.AgentNamespace, Name: "styrmin-agent"}, &lease); err != nil {
		t.Fatalf("the agents' lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("lease %s has no holder", lease.Name)
	}
	if n := agents[1-ran[0]].Logged(func(l agenttest.LogEntry) bool { return l.Str("msg") == "synced" }); n != 0 {
		t.Errorf("the agent without the lease synced %d times", n)
	}
}

// requireFaultFree checks what every fault test promises for a
// deployment: its tasks are exactly those of seqs (none lost, none made
// twice), each Succeeded with every step run in one attempt (an earlier
// one may be Superseded before it ran, never a step twice); the Jobs of
// its namespace are exactly jobs; its StyrminDeployment holds and runs
// the last of seqs.
func (e *agentEnv) requireFaultFree(t *testing.T, ns, name string, seqs []int64, jobs ...string) {
	t.Helper()
	e.requireFaultFreeResumed(t, "", ns, name, seqs, jobs...)
}

// requireFaultFreeResumed is requireFaultFree after the agent was
// restarted while task resumed ("" none) ran a step: that one step may
// count a second attempt (the new process entered it again; its effects,
// the Jobs, are still checked to exist once).
func (e *agentEnv) requireFaultFreeResumed(t *testing.T, resumed, ns, name string, seqs []int64, jobs ...string) {
	t.Helper()
	var got []int64
	for _, task := range e.tasksOf(t, ns) {
		again := 0
		if task.Name == resumed {
			again = 1
		}
		got = append(got, task.Spec.ToSequence)
		// The last change runs; an earlier one that a newer task replaced
		// before it started (changes synced together after the fault) ends
		// Superseded without running a step, as it would without a fault.
		superseded := task.Status.Phase == v1alpha1.TaskSuperseded && task.Spec.ToSequence != seqs[len(seqs)-1]
		if task.Status.Phase != v1alpha1.TaskSucceeded && !superseded {
			t.Errorf("task %s: %s (%s), want Succeeded", task.Name, task.Status.Phase, task.Status.Message)
		}
		for _, s := range task.Status.Steps {
			if s.StartedAt != nil && s.FinishedAt != nil {
				t.Logf("%s %s: %s in %s", task.Name, s.Name, s.State, s.FinishedAt.Sub(s.StartedAt.Time))
			}
			if s.Attempts == 2 && again > 0 {
				again--
				s.Attempts = 1
				t.Logf("task %s step %s entered again after the agent's restart", task.Name, s.Name)
			}
			switch {
			case s.Attempts > 1:
				t.Errorf("task %s step %s ran %d times, want once", task.Name, s.Name, s.Attempts)
			case superseded && (s.State == v1alpha1.StepSkipped || s.State == v1alpha1.StepSucceeded):
			case s.Action == string(drivers.ActionRestoreBackup) && s.State == v1alpha1.StepSkipped && s.Attempts == 0:
				// Planned skipped: the deployment is no clone from a backup.
			case s.State != v1alpha1.StepSucceeded || s.Attempts != 1:
				t.Errorf("task %s step %s: %s after %d attempts, want Succeeded after 1", task.Name, s.Name, s.State, s.Attempts)
			}
		}
	}
	if !slices.Equal(got, seqs) {
		t.Errorf("%s tasks for sequences %v, want %v", name, got, seqs)
	}
	var list batchv1.JobList
	if err := e.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range list.Items {
		names = append(names, j.Name)
		t.Logf("job %s created %s, completed %v", j.Name, j.CreationTimestamp.Format(time.TimeOnly), j.Status.CompletionTime)
	}
	slices.Sort(names)
	slices.Sort(jobs)
	if !slices.Equal(names, jobs) {
		t.Errorf("Jobs in %s: %v, want %v", ns, names, jobs)
	}
	last := seqs[len(seqs)-1]
	if sd := e.deployment(t, ns); sd == nil || sd.Spec.Sequence != last || sd.Status.ActiveSequence != last {
		t.Errorf("StyrminDeployment %s not at the last lock %d: %+v", ns, last, sd)
	}
}

// agentSourceName is the StyrminSource the agent keeps its position in
// (the default of operator.Options.SourceName).
const agentSourceName = "styrmin"

// source reads the agent's StyrminSource.
func (e *agentEnv) source(ctx context.Context) (*v1alpha1.StyrminSource, error) {
	var src v1alpha1.StyrminSource
	err := e.c.Get(ctx, client.ObjectKey{Namespace: config.AgentNamespace, Name: agentSourceName}, &src)
	return &src, err
}
