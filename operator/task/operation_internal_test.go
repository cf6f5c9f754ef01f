package task

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
)

func change(seq int64) v1alpha1.StyrminTask {
	return v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: "c" + string(rune('0'+seq))}, Spec: v1alpha1.StyrminTaskSpec{ToSequence: seq}}
}

func op(name string, kind v1alpha1.OperationKind, seq int64, created int, attempt int32, phase v1alpha1.TaskPhase) v1alpha1.StyrminTask {
	return v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(created), 0))},
		Spec:       v1alpha1.StyrminTaskSpec{ToSequence: seq, Operation: &v1alpha1.TaskOperation{Kind: kind, Name: strings.Split(name, "-")[0], Attempt: attempt}},
		Status:     v1alpha1.StyrminTaskStatus{Phase: phase},
	}
}

func TestAnOperationRunsAfterTheChangesUpToItsSequenceAndBeforeTheLaterOnes(t *testing.T) {
	t.Parallel()
	c2, c3 := change(2), change(3)
	b1 := op("b1", v1alpha1.OperationBackup, 2, 10, 1, "")
	b2 := op("b2", v1alpha1.OperationBackup, 2, 20, 1, "")
	for _, tc := range []struct {
		name string
		s, t v1alpha1.StyrminTask
		want bool
	}{
		{"the change of its sequence first", c2, b1, true},
		{"then the operation", b1, c2, false},
		{"the operation before the next change", b1, c3, true},
		{"the next change after it", c3, b1, false},
		{"operations at one sequence in the order made", b1, b2, true},
		{"not the other way round", b2, b1, false},
		{"changes by sequence", c2, c3, true},
	} {
		if got := runsBefore(&tc.s, &tc.t); got != tc.want {
			t.Errorf("%s: runsBefore(%s, %s) = %t, want %t", tc.name, tc.s.Name, tc.t.Name, got, tc.want)
		}
	}
}

// TestTwoOperationsRunInOneOrderOnEveryDeploymentTheyName pins that the
// order of two operations at one sequence is theirs, not their tasks':
// restore R1 made its task on a at once and on b late (its first create
// refused), after restore R2 made both of its own. Ordered by when each
// task was made (then by task name), a ran R1 then R2 and b R2 then R1:
// two deployments left holding different backups' data, both restores
// Succeeded. Each deployment now orders them as the operations were made,
// then by kind, name and attempt when made in one second.
func TestTwoOperationsRunInOneOrderOnEveryDeploymentTheyName(t *testing.T) {
	t.Parallel()
	at := func(sec int64) *metav1.Time { t := metav1.NewTime(time.Unix(sec, 0)); return &t }
	task := func(dep, opName string, opMade, taskMade int64, attempt int32) v1alpha1.StyrminTask {
		tk := op(opName+"-"+dep, v1alpha1.OperationRestore, 4, int(taskMade), attempt, "")
		tk.Spec.Operation.Created = at(opMade)
		return tk
	}
	for _, tc := range []struct {
		name   string
		r1, r2 v1alpha1.StyrminTask
	}{
		{"a: both tasks made as their restores were", task("a", "r1", 100, 100, 1), task("a", "r2", 101, 101, 1)},
		{"b: r1's task made after r2's", task("b", "r1", 100, 102, 1), task("b", "r2", 101, 101, 1)},
		{"c: the two made in one second, r1's task late", task("c", "r1", 100, 103, 1), task("c", "r2", 100, 100, 1)},
		{"d: r1's retry after r2", task("d", "r1", 100, 104, 2), task("d", "r2", 101, 101, 1)},
	} {
		if !runsBefore(&tc.r1, &tc.r2) || runsBefore(&tc.r2, &tc.r1) {
			t.Errorf("%s: r2 runs before r1; want r1 (made first, or first by name) before r2 on every deployment", tc.name)
		}
	}
	// A task made before its operation recorded when it was made is
	// ordered by its own making, as before.
	old, made := op("r3-e", v1alpha1.OperationRestore, 4, 50, 1, ""), task("e", "r4", 60, 60, 1)
	if !runsBefore(&old, &made) {
		t.Error("a task without its operation's time does not run before an operation made after it")
	}
}

func TestAFailedRestoreHoldsTheLaterChangesUntilANewerAttempt(t *testing.T) {
	t.Parallel()
	c3 := change(3)
	failed := op("r1-a", v1alpha1.OperationRestore, 2, 10, 1, v1alpha1.TaskFailed)
	failed.Status.Message = "step restore/core/1:runJob failed: job restore-db failed\nlogs"
	failed.Status.Steps = []v1alpha1.TaskStep{{Name: "restore/pre/1:stopComponents", State: v1alpha1.StepSucceeded, StartedAt: &metav1.Time{}},
		{Name: "restore/core/1:runJob", State: v1alpha1.StepFailed, StartedAt: &metav1.Time{}, Attempts: 1}}
	// Refused when its turn came (its backup taken by a newer driver
	// version than the deployment runs): no step ran.
	refused := op("r1-a", v1alpha1.OperationRestore, 2, 10, 1, v1alpha1.TaskFailed)
	refused.Status.Steps = []v1alpha1.TaskStep{{Name: "restore/pre/1:stopComponents", State: v1alpha1.StepSkipped}, {Name: "restore/core/1:runJob", State: v1alpha1.StepSkipped}}
	refusedRetry := refused
	refusedRetry.Name, refusedRetry.Spec.Operation = "r1-a-2", &v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: "r1", Attempt: 2}
	refusedRetry.Status.Message = "the backup was taken with driver graphhub 2.1.0, newer than the 2.0.0 that runs"
	retried := op("r1-a-2", v1alpha1.OperationRestore, 2, 20, 2, v1alpha1.TaskSucceeded)
	failedBackup := op("b1-a", v1alpha1.OperationBackup, 2, 10, 1, v1alpha1.TaskFailed)
	later := op("r2-a", v1alpha1.OperationRestore, 3, 30, 1, v1alpha1.TaskFailed)
	for _, tc := range []struct {
		name  string
		tasks []v1alpha1.StyrminTask
		want  string
	}{
		{"a failed restore holds", []v1alpha1.StyrminTask{failed, c3}, "restore in progress: StyrminRestore r1 failed (step restore/core/1:runJob failed: job restore-db failed)"},
		{"one refused before any step ran does not", []v1alpha1.StyrminTask{refused, c3}, ""},
		{"a retry refused before any step ran after an attempt that ran does", []v1alpha1.StyrminTask{failed, refusedRetry, c3}, "restore in progress: StyrminRestore r1 failed (the backup"},
		{"its retry that succeeded does not", []v1alpha1.StyrminTask{failed, retried, c3}, ""},
		{"a failed backup does not", []v1alpha1.StyrminTask{failedBackup, c3}, ""},
		{"a restore ordered after the change does not", []v1alpha1.StyrminTask{later, c3}, ""},
	} {
		got := restoreHold(&c3, tc.tasks)
		if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestACloneFromABackupRestoresItAtTheSetupHooksStepAndOtherCreatesSkipIt(t *testing.T) {
	t.Parallel()
	d := &drivers.Driver{Name: "db", Version: "1.0.0", Hooks: map[drivers.Hook]drivers.Modes{
		drivers.HookSetup:   {Post: []drivers.Step{{Action: drivers.ActionWaitReady, Components: []string{"db"}}, {Action: drivers.ActionRestoreBackup}, {Action: drivers.ActionRunJob, Component: "db", Job: "init"}}},
		drivers.HookUpgrade: {Pre: []drivers.Step{{Action: drivers.ActionBackup}}, Core: []drivers.Step{{Action: drivers.ActionUpgradeDeploymentVersion}}},
		drivers.HookBackup:  {Core: []drivers.Step{{Action: drivers.ActionRunJob, Component: "db", Job: "dump"}}},
		drivers.HookRestore: {Pre: []drivers.Step{{Action: drivers.ActionStopComponents, Components: []string{"app"}}}, Core: []drivers.Step{{Action: drivers.ActionRunJob, Component: "db", Job: "load"}}},
	}}
	in := func(cf *drivers.CloneSource) *resolver.Instance {
		return &resolver.Instance{ID: resolver.ID{Cluster: "local", Environment: "preview", Name: "hub"}, Sequence: 4,
			Context: &drivers.Context{Environment: drivers.EnvironmentContext{BackupLocation: "s3://b/local/preview", ClonedFrom: cf}}}
	}
	names := func(steps []v1alpha1.TaskStep) []string {
		var out []string
		for _, s := range steps {
			out = append(out, s.Name+"="+string(s.State)+":"+s.Args[argArtifact])
		}
		return out
	}
	plan := func(wf v1alpha1.Workflow, i *resolver.Instance) []string {
		steps, err := StepsFor(wf, d, i.BackupFirst)
		if err == nil {
			steps, err = expandSteps(wf, d, nil, i, steps)
		}
		if err != nil {
			t.Fatal(err)
		}
		return names(steps)
	}
	clone := plan(v1alpha1.WorkflowCreate, in(&drivers.CloneSource{Environment: "dev", Backup: "nightly", Location: "s3://b/local/dev"}))
	want := []string{
		"setup/post/1:waitReady=Pending:",
		"setup/post/2:restoreBackup/restore/pre/1:stopComponents=Pending:s3://b/local/dev/nightly/hub",
		"setup/post/2:restoreBackup/restore/core/1:runJob=Pending:s3://b/local/dev/nightly/hub",
		"setup/post/3:runJob=Pending:",
	}
	if got := clone[len(clone)-4:]; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("a clone's create:\n%s\nwant it to end\n%s", strings.Join(clone, "\n"), strings.Join(want, "\n"))
	}
	plain := plan(v1alpha1.WorkflowCreate, in(nil))
	if !strings.Contains(strings.Join(plain, " "), "setup/post/2:restoreBackup=Skipped:") {
		t.Errorf("a create that is no clone: %v, want the restoreBackup step skipped", plain)
	}
	up := plan(v1alpha1.WorkflowUpgrade, in(nil))
	backupJob := "upgrade/pre/1:backup/backup/core/1:runJob=Pending:s3://b/local/preview/" + InlineBackupID(in(nil).ID, 4) + "/hub"
	if len(up) < 1 || up[0] != backupJob {
		t.Errorf("an upgrade with a backup step: %v, want the backup hook's job first, to the deployment's own location", up)
	}
	// A driver without the step, and an instance asking for a backup
	// first (styrminctl upgrade --backup-first).
	d.Hooks[drivers.HookUpgrade] = drivers.Modes{Pre: []drivers.Step{{Action: drivers.ActionStopComponents, Components: []string{"app"}}}, Core: []drivers.Step{{Action: drivers.ActionUpgradeDeploymentVersion}}}
	first := in(nil)
	first.BackupFirst = true
	up = plan(v1alpha1.WorkflowUpgrade, first)
	if len(up) < 2 || up[0] != backupJob || !strings.HasPrefix(up[1], "upgrade/pre/2:stopComponents") {
		t.Errorf("an upgrade with a backup first: %v, want the backup's job before the upgrade's pre steps", up)
	}
}

// TestAFailedOperationJobIsTheOneDeletedBeforeItsStepRunsAgain: a runJob
// step a driver retries has its failed Job deleted before the next
// attempt (clearFailedRun). An operation's Job (a backup's, a restore's,
// or such a step inside a change) is named apart, and the deletion named
// the change's Job instead: the failed Job stayed, and every attempt read
// it failed again without running.
func TestAFailedOperationJobIsTheOneDeletedBeforeItsStepRunsAgain(t *testing.T) {
	t.Parallel()
	backup := op("nightly-hub", v1alpha1.OperationBackup, 3, 10, 1, v1alpha1.TaskRunning)
	backup.Spec.Deployment = v1alpha1.DeploymentID{Cluster: "local", Environment: "data", Name: "hub"}
	upgrade := change(3)
	upgrade.Spec.Deployment = backup.Spec.Deployment
	for _, tc := range []struct {
		name string
		task v1alpha1.StyrminTask
		step drivers.Step
	}{
		{"a backup task's job", backup, drivers.Step{Action: drivers.ActionRunJob, Job: "dump", Retry: drivers.RetryPolicy{Attempts: 3}}},
		{"a backup step inside a change", upgrade, drivers.Step{Action: drivers.ActionRunJob, Job: "dump", Retry: drivers.RetryPolicy{Attempts: 3},
			Args: map[string]string{argOperation: string(v1alpha1.OperationBackup)}}},
		{"a change's own job", upgrade, drivers.Step{Action: drivers.ActionRunJob, Job: "migrate", Retry: drivers.RetryPolicy{Attempts: 3}}},
	} {
		made := runJobName(&tc.task, tc.step.Job, tc.step.Args)
		st := taskStepOf("pre/1:runJob", "upgrade", "pre", tc.step)
		// The agent's own keys are added after (expandSteps' hookSteps):
		// a driver's never reach the task's step.
		for k, v := range tc.step.Args {
			if st.Args == nil {
				st.Args = map[string]string{}
			}
			st.Args[k] = v
		}
		if deleted := retriedJobName(&tc.task, &st); deleted != made {
			t.Errorf("%s: the step makes Job %s but a retry deletes %s", tc.name, made, deleted)
		}
		if IsOperation(&tc.task) || tc.step.Args[argOperation] != "" {
			if made == JobName(tc.task.Spec.Deployment.Name, tc.step.Job, tc.task.Spec.ToSequence) {
				t.Errorf("%s: an operation's Job %s is named as a change's", tc.name, made)
			}
		}
	}
}

// TestATaskStepKeepsOnlyTheArgumentsADriverMayDeclare: a driver's step
// args were copied into the task's step as they were, and the agent read
// its own keys there too: a driver could name a backup and its artefact
// (and get the environment's backup credentials) or retry past the bound.
// The loader refuses such args now; a task keeps only those a driver may
// declare, whatever the driver (one loaded before that check).
func TestATaskStepKeepsOnlyTheArgumentsADriverMayDeclare(t *testing.T) {
	t.Parallel()
	st := taskStepOf("pre/1:runJob", "upgrade", "pre", drivers.Step{
		Action: drivers.ActionRunJob, Job: "migrate", Component: "server", Command: []string{"migrate"},
		Args: map[string]string{"operation": "backup", "backupID": "prod-nightly", "artifact": "s3://x", "retryAttempts": "500", "retryBackoff": "1ns", "container": "app", "backoffLimit": "2"},
	})
	for _, k := range []string{"operation", "backupID", "artifact", "retryAttempts", "retryBackoff"} {
		if v, ok := st.Args[k]; ok {
			t.Errorf("the task's step keeps the driver's %s=%q", k, v)
		}
	}
	if st.Args["container"] != "app" || st.Args["backoffLimit"] != "2" || st.Args["job"] != "migrate" || st.Args["component"] != "server" {
		t.Errorf("the step lost what the driver may declare or the agent sets: %v", st.Args)
	}
	if p := retryPolicy(&st); p.Attempts > 1 {
		t.Errorf("retry policy %+v from a driver's args, want none", p)
	}
}

// TestAnUpgradesBackupRunsTheBackupHookOfTheDriverTheDeploymentRuns pins
// whose backup hook an upgrade taking a backup first runs: the running
// version's, whose data it is (a backup taken then by hand would be its
// too). It ran the new version's, with the new chart's pod, and recorded
// the old driver: its artefact was in a format the record did not say,
// and its pod could need objects only the upgrade makes. The plan shows
// the same steps; a running version without a backup hook leaves the new
// version's, the only one to be had.
func TestAnUpgradesBackupRunsTheBackupHookOfTheDriverTheDeploymentRuns(t *testing.T) {
	t.Parallel()
	driver := func(version, dump string, backs bool) *drivers.Driver {
		d := &drivers.Driver{Name: "db", Version: version, Hooks: map[drivers.Hook]drivers.Modes{
			drivers.HookUpgrade: {Core: []drivers.Step{{Action: drivers.ActionUpgradeDeploymentVersion}}},
		}}
		if backs {
			d.Hooks[drivers.HookBackup] = drivers.Modes{Core: []drivers.Step{{Action: drivers.ActionRunJob, Component: "db", Job: dump}}}
			d.Hooks[drivers.HookRestore] = drivers.Modes{Core: []drivers.Step{{Action: drivers.ActionRunJob, Component: "db", Job: "load"}}}
		}
		return d
	}
	v2 := driver("2.0.0", "dump-v2", true)
	in := &resolver.Instance{ID: resolver.ID{Cluster: "local", Environment: "preview", Name: "hub"}, Sequence: 5, BackupFirst: true,
		Context: &drivers.Context{Environment: drivers.EnvironmentContext{BackupLocation: "s3://b/local/preview"}}}
	for _, tc := range []struct {
		name    string
		running *drivers.Driver
		job     string
	}{
		{"the running version's hook", driver("1.0.0", "dump-v1", true), "dump-v1"},
		{"none known: the new version's", nil, "dump-v2"},
		{"the running version cannot back up: the new version's", driver("1.0.0", "", false), "dump-v2"},
	} {
		steps, err := StepsForInstance(v1alpha1.WorkflowUpgrade, v2, tc.running, in)
		if err != nil {
			t.Fatal(err)
		}
		plan := planner.ActionsForInstance(planner.WorkflowUpgrade, v2, tc.running, in)
		if len(steps) < 1 || steps[0].Args[argJob] != tc.job || steps[0].Args[argOperation] != "backup" {
			t.Errorf("%s: the upgrade's first step %+v; want the backup hook's job %s", tc.name, steps, tc.job)
		}
		if len(plan) != len(steps) || len(plan) > 0 && plan[0].Name != steps[0].Name {
			t.Errorf("%s: the plan shows %v, the task runs %v", tc.name, plan, steps)
		}
	}
}
