package operator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAgentKilledAtEveryStepOfAnUpgradeResumes SIGKILLs the agent process
// twice at every step of an upgrade task: once just after the step was
// written Running (its action not run yet) and once just after its action
// finished (its result not written yet), restarting it each time. Changes
// are committed while the agent is dead. The upgrade completes with every
// step run again after each kill, no task is lost, and the deployment ends
// at the last sequence.
//
// The agent runs with --debug-step-pause, which holds it for a moment at
// both points so the kill lands there, and without leader election, so a
// restarted agent does not wait for the killed one's lease to expire.
func TestAgentKilledAtEveryStepOfAnUpgradeResumes(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	e.lock(t)
	flags := []string{"--debug-step-pause=1s", "--leader-elect=false"}
	agent := e.startAgent(t, flags...)
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))

	upgrade := e.change(t, "hub", "hub: app 1.4.1", hubConfig("1.4.1", 2, "info"))
	task := "hub-" + fmt.Sprint(upgrade)
	const steps = 5 // stop workers, migrate, write, start workers, wait
	last := upgrade
	kills := 0
	for k := range steps {
		for _, point := range []string{"step started", "step action done"} {
			agent.WaitLog(t, 2*time.Minute, fmt.Sprintf("%q of step %d of %s", point, k, task), func(l agenttest.LogEntry) bool {
				return l.Str("msg") == point && l.Str("task") == task && l.Num("index") == int64(k)
			})
			agent.Kill(t)
			kills++
			switch {
			case k == 1 && point == "step started":
				// A configuration change while the agent is dead: its
				// task is created after the restart and runs last.
				last = e.change(t, "hub", "hub: three workers", hubConfig("1.4.1", 3, "info"))
			case k == 3 && point == "step action done":
				// And another: it overtakes the one above, still pending.
				last = e.change(t, "hub", "hub: debug logs", hubConfig("1.4.1", 3, "debug"))
			}
			agent = e.startAgent(t, flags...)
		}
	}
	up := e.waitTask(t, hubNamespace, "hub", upgrade)
	requireSucceeded(t, up)
	for _, s := range up.Status.Steps {
		if s.State != v1alpha1.StepSucceeded || s.Attempts != 3 {
			t.Errorf("step %s: %s after %d attempts; want Succeeded after 3 (two kills)", s.Name, s.State, s.Attempts)
		}
	}
	final := e.waitTask(t, hubNamespace, "hub", last)
	requireSucceeded(t, final)

	tasks := e.tasksOf(t, hubNamespace)
	if int64(len(tasks)) != last {
		t.Fatalf("%d hub tasks, want %d (one per sequence)", len(tasks), last)
	}
	for _, task := range tasks {
		if !task.Status.Phase.Terminal() {
			t.Errorf("task %s left %s", task.Name, task.Status.Phase)
		}
		t.Logf("%s %s → %s %s", task.Name, task.Spec.Workflow, task.Status.Phase, task.Status.Message)
	}
	sd := e.deployment(t, hubNamespace)
	if sd.Spec.Sequence != last || sd.Status.ActiveSequence != last {
		t.Errorf("StyrminDeployment at sequence %d (active %d), want the last %d", sd.Spec.Sequence, sd.Status.ActiveSequence, last)
	}
	if got := e.workerReplicas(t); got != 3 {
		t.Errorf("hub-worker replicas %d, want 3", got)
	}
	t.Logf("%d kills", kills)
}
