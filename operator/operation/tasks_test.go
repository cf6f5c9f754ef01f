package operation_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// backupDriver is a driver source whose every version declares backup
// and restore hooks (and no deleteBackup hook).
type backupDriver struct{}

func (backupDriver) Driver(_ context.Context, req driversource.Request) (*drivers.Driver, error) {
	job := drivers.Modes{Core: []drivers.Step{{Action: drivers.ActionRunJob, Component: "db", Job: "dump"}}}
	return &drivers.Driver{Name: req.Ref.Name, Version: req.Ref.Version,
		Hooks: map[drivers.Hook]drivers.Modes{drivers.HookBackup: job, drivers.HookRestore: job}}, nil
}

// restoring sets up hub running graphhub@1.4.0 at sequence 3, a backup
// monday that holds it, and the StyrminRestore controller, with git
// declaring local/data's backup location and its credentials Secret
// backup-credentials (marked for backups, with the keys s3:// needs).
func restoring(t *testing.T) (context.Context, client.Client, *operation.RestoreReconciler, operation.Options) {
	t.Helper()
	ctx, cl := operations(t)
	newRunning(ctx, t, cl, "data-hub", "hub")
	newBackup(ctx, t, cl, "monday", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "s3://backups/local/data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-backup-monday-1", Phase: v1alpha1.OperationSucceeded,
			Artifact: "s3://backups/local/data/monday/hub", Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}})
	if err := cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "backup-credentials", Labels: map[string]string{task.LabelBackupCredentials: "true"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "not-a-real-key"}}); err != nil {
		t.Fatal(err)
	}
	opts := options(cl, cl)
	opts.Drivers = backupDriver{}
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		return []resolver.EnvironmentBackups{{Cluster: "local", Environment: "data", Location: "s3://backups/local/data", Secret: "backup-credentials"}}, nil
	})
	r, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, cl, r, opts
}

// newRunning creates the StyrminDeployment of local/data's deployment
// name in namespace, running graphhub@1.4.0 at sequence 3.
func newRunning(ctx context.Context, t *testing.T, cl client.Client, namespace, name string) {
	t.Helper()
	newRunningAt(ctx, t, cl, namespace, name, "1.4.0")
}

// newRunningAt is newRunning with graphhub at version.
func newRunningAt(ctx context.Context, t *testing.T, cl client.Client, namespace, name, version string) {
	t.Helper()
	in := &resolver.Instance{APIVersion: resolver.APIVersion, Kind: resolver.KindInstance, ID: resolver.ID{Cluster: "local", Environment: "data", Name: name},
		Sequence: 3, SourceCommit: "unknown", Driver: resolver.DriverRef{Name: "graphhub", Version: version}, AppVersion: version,
		Context: &drivers.Context{Parameters: map[string]any{"logLevel": "info"}}}
	var err error
	if in.Digest, err = in.ComputeDigest(); err != nil {
		t.Fatal(err)
	}
	spec, err := instance.SpecFromInstance(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := instance.InstanceFromSpec(&spec); err != nil {
		t.Fatal(err)
	}
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "data", Name: name}
	if err := cl.Create(ctx, &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: id.Labels()}, Spec: spec}); err != nil {
		t.Fatal(err)
	}
}

// endTask ends hub's task name in phase, as the task controller would.
func endTask(ctx context.Context, t *testing.T, cl client.Client, name string, phase v1alpha1.TaskPhase) *v1alpha1.StyrminTask {
	t.Helper()
	return endTaskIn(ctx, t, cl, "data-hub", name, phase)
}

// endTaskIn is endTask for hub's task in namespace.
func endTaskIn(ctx context.Context, t *testing.T, cl client.Client, namespace, name string, phase v1alpha1.TaskPhase) *v1alpha1.StyrminTask {
	t.Helper()
	var tk v1alpha1.StyrminTask
	if err := cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &tk); err != nil {
		t.Fatalf("hub's task %s: %v", name, err)
	}
	now := metav1.Now()
	tk.Status = v1alpha1.StyrminTaskStatus{Phase: phase, Workflow: v1alpha1.WorkflowRestore, FromSequence: 3, StartedAt: &now, FinishedAt: &now, Message: "ended " + string(phase)}
	if err := cl.Status().Update(ctx, &tk); err != nil {
		t.Fatal(err)
	}
	return &tk
}

// retryRestore asks rs to run again and reconciles it.
func retryRestore(ctx context.Context, t *testing.T, cl client.Client, r reconcile.Reconciler, rs *v1alpha1.StyrminRestore, retry string) {
	t.Helper()
	rs.Spec.Retry = retry
	if err := cl.Update(ctx, rs); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, rs)
}

// TestRestoresWhoseTaskNamesReadAlikeEachGetTheirOwnTaskAndResult pins
// the names of restore tasks: a retry's attempt once followed the name
// (restore fix's second attempt and restore fix-2's first were both
// hub-restore-fix-2), and the restore that came second took the other's
// task as its own. Fix-2 then reported Succeeded with nothing restored;
// the other way round, fix reported Succeeded while its failed first
// attempt held hub's changes.
func TestRestoresWhoseTaskNamesReadAlikeEachGetTheirOwnTaskAndResult(t *testing.T) {
	t.Parallel()
	ctx, cl, r, _ := restoring(t)
	task := func(rs *v1alpha1.StyrminRestore) *v1alpha1.StyrminTask {
		t.Helper()
		var tk v1alpha1.StyrminTask
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "data-hub", Name: rs.Status.Deployments[0].Task}, &tk); err != nil {
			t.Fatalf("restore %s's task: %v", rs.Name, err)
		}
		return &tk
	}
	owns := func(rs *v1alpha1.StyrminRestore, attempt int32) {
		t.Helper()
		if op := task(rs).Spec.Operation; op == nil || op.Name != rs.Name || op.Attempt != attempt {
			t.Fatalf("restore %s (attempt %d) has task %s of %+v, want its own", rs.Name, attempt, rs.Status.Deployments[0].Task, op)
		}
	}

	// Fix fails, then its retry succeeds; fix-2 comes after.
	fix := newRestore(ctx, t, cl, "fix", "monday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, r, fix)
	owns(fix, 1)
	endTask(ctx, t, cl, fix.Status.Deployments[0].Task, v1alpha1.TaskFailed)
	reconcileAndRead(ctx, t, cl, r, fix)
	retryRestore(ctx, t, cl, r, fix, "1")
	owns(fix, 2)
	endTask(ctx, t, cl, fix.Status.Deployments[0].Task, v1alpha1.TaskSucceeded)
	reconcileAndRead(ctx, t, cl, r, fix)
	if fix.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("restore fix after its retry succeeded: %s %q", fix.Status.Phase, fix.Status.Message)
	}
	fix2 := newRestore(ctx, t, cl, "fix-2", "monday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, r, fix2)
	reconcileAndRead(ctx, t, cl, r, fix2)
	owns(fix2, 1)
	if fix2.Status.Phase != v1alpha1.OperationRunning {
		t.Fatalf("restore fix-2, whose task has not run: %s %q, want Running", fix2.Status.Phase, fix2.Status.Message)
	}
	// Ended before the next restore of hub starts: one restore runs on a
	// deployment at a time.
	endTask(ctx, t, cl, fix2.Status.Deployments[0].Task, v1alpha1.TaskSucceeded)
	reconcileAndRead(ctx, t, cl, r, fix2)

	// The other way round: undo-2 succeeds, then undo fails and is
	// retried.
	undo2 := newRestore(ctx, t, cl, "undo-2", "monday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, r, undo2)
	endTask(ctx, t, cl, undo2.Status.Deployments[0].Task, v1alpha1.TaskSucceeded)
	reconcileAndRead(ctx, t, cl, r, undo2)
	undo := newRestore(ctx, t, cl, "undo", "monday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, r, undo)
	endTask(ctx, t, cl, undo.Status.Deployments[0].Task, v1alpha1.TaskFailed)
	reconcileAndRead(ctx, t, cl, r, undo)
	retryRestore(ctx, t, cl, r, undo, "1")
	reconcileAndRead(ctx, t, cl, r, undo)
	owns(undo, 2)
	if undo.Status.Phase != v1alpha1.OperationRunning {
		t.Fatalf("restore undo, whose retry has not run: %s %q, want Running", undo.Status.Phase, undo.Status.Message)
	}
	for _, rs := range []*v1alpha1.StyrminRestore{fix, fix2, undo2, undo} {
		if n := rs.Status.Deployments[0].Task; len(n) > 63 {
			t.Errorf("restore %s's task name %s has %d characters, want at most 63 (it labels the task's jobs)", rs.Name, n, len(n))
		}
	}
}

// TestARestoreNeverTakesAnotherOperationsTaskAtItsTaskNameAsItsOwn pins
// what a restore does with a task already at its task's name that is
// not its own (made by hand, or by an older agent for another restore):
// an error naming that task, never its result as the restore's.
func TestARestoreNeverTakesAnotherOperationsTaskAtItsTaskNameAsItsOwn(t *testing.T) {
	t.Parallel()
	ctx, cl, r, _ := restoring(t)
	name := task.OperationTaskName("hub", v1alpha1.OperationRestore, "fix", 1)
	other := newOperationTask(ctx, t, cl, name, v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: "other", BackupID: "monday",
		Artifact: "s3://backups/local/data/monday/hub", Attempt: 1}, 3, 3, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded})
	fix := newRestore(ctx, t, cl, "fix", "monday", v1alpha1.StyrminRestoreStatus{})

	_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(fix)})
	if err == nil || !strings.Contains(err.Error(), "data-hub/"+name) || !strings.Contains(err.Error(), "StyrminRestore other") {
		t.Fatalf("the start of a restore whose task name holds another restore's task: %v, want an error naming it and whose it is", err)
	}
	reconcileAndRead(ctx, t, cl, r, fix)
	d := fix.Status.Deployments[0]
	if fix.Status.Phase != v1alpha1.OperationFailed || d.Phase != v1alpha1.OperationFailed ||
		!strings.Contains(d.Message, "data-hub/"+name) || !strings.Contains(d.Message, "StyrminRestore other") {
		t.Fatalf("restore fix: %s, hub %s %q; want both Failed, naming the other restore's task", fix.Status.Phase, d.Phase, d.Message)
	}
	var after v1alpha1.StyrminTask
	if err := cl.Get(ctx, client.ObjectKeyFromObject(other), &after); err != nil || after.Spec.Operation.Name != "other" || after.Status.Phase != v1alpha1.TaskSucceeded {
		t.Fatalf("the other restore's task after: %+v %s (%v), want it untouched", after.Spec.Operation, after.Status.Phase, err)
	}
}

// TestARestoreWhoseNameCannotLabelItsTasksIsRefusedAndHoldsNothing pins
// the check of a restore's name: its tasks carry it as a label value (at
// most 63 characters). A longer one was started, its task refused by the
// API server on every pass: it stayed Running for ever, and its backup's
// deletion waited for it for ever.
func TestARestoreWhoseNameCannotLabelItsTasksIsRefusedAndHoldsNothing(t *testing.T) {
	t.Parallel()
	ctx, cl, r, opts := restoring(t)
	long := "put-the-hub-back-as-it-was-on-monday-before-the-migration-broke-it"
	rs := newRestore(ctx, t, cl, long, "monday", v1alpha1.StyrminRestoreStatus{})
	// Without the check, each pass fails making the task.
	reconcileTimes(ctx, t, cl, r, rs, 3)
	if rs.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(rs.Status.Message, "metadata.name") ||
		!strings.Contains(rs.Status.Message, "at most 63 characters") || len(rs.Status.Deployments) != 0 {
		t.Fatalf("a restore named with %d characters: %s %q, %d deployments; want it refused naming metadata.name and what is expected",
			len(long), rs.Status.Phase, rs.Status.Message, len(rs.Status.Deployments))
	}
	// One an older agent started under such a name ends Failed too, at
	// the next pass that would make its task.
	started := newRestore(ctx, t, cl, long+"-too", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationRunning, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-restore-" + long + "-too", Attempt: 1,
			Phase: v1alpha1.OperationPending, Artifact: "s3://backups/local/data/monday/hub", Sequence: 3}}})
	reconcileTimes(ctx, t, cl, r, started, 3)
	if started.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(started.Status.Message, "metadata.name") {
		t.Fatalf("a restore with a name too long started by an older agent: %s %q, want it Failed naming metadata.name", started.Status.Phase, started.Status.Message)
	}
	var tasks v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &tasks, client.InNamespace("data-hub")); err != nil || len(tasks.Items) != 0 {
		t.Fatalf("hub's tasks after the refusal: %d (%v), want none", len(tasks.Items), err)
	}

	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "monday"}}
	if err := cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, backups, b) {
		t.Fatalf("backup monday stays at its deletion: %+v", b.Status.Conditions)
	}
}

// TestAnOperationBegunByAnOlderAgentFindsItsTasksUnderTheirOldNames pins
// how an operation finds the tasks an older agent made, whose names had
// no hash (hub-restore-fix, hub-deletebackup-monday): by their
// spec.operation. A backup's deletion that found no deleteBackup task
// under the new name let the backup go while its old one ran (and
// deleted that task); a retry planned by an older agent that found no
// failed attempt went after hub's later changes, which its failure held.
func TestAnOperationBegunByAnOlderAgentFindsItsTasksUnderTheirOldNames(t *testing.T) {
	t.Parallel()
	ctx, cl, r, opts := restoring(t)
	// A change to sequence 4 waits behind restore fix, whose first
	// attempt failed; the older agent planned its retry, then stopped.
	newHubChange4(ctx, t, cl)
	op := v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: "fix", BackupID: "monday", Artifact: "s3://backups/local/data/monday/hub", Attempt: 1}
	newOperationTask(ctx, t, cl, "hub-restore-fix", op, 3, 3, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskFailed})
	fix := newRestore(ctx, t, cl, "fix", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationRunning, Environment: "data", ObservedRetry: "1",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-restore-fix-2", Attempt: 2,
			Phase: v1alpha1.OperationPending, Artifact: "s3://backups/local/data/monday/hub", Sequence: 3}}})
	fix.Spec.Retry = "1"
	if err := cl.Update(ctx, fix); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, fix)
	var retry v1alpha1.StyrminTask
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "data-hub", Name: "hub-restore-fix-2"}, &retry); err != nil {
		t.Fatalf("the retry the older agent planned: %v", err)
	}
	if retry.Spec.ToSequence != 3 {
		t.Errorf("the retry of restore fix goes at sequence %d, want 3, its failed attempt's place before the change it holds", retry.Spec.ToSequence)
	}

	// Monday's deletion, begun by the older agent: its deleteBackup task
	// for hub runs.
	newOperationTask(ctx, t, cl, "hub-deletebackup-monday", v1alpha1.TaskOperation{Kind: v1alpha1.OperationDeleteBackup, Name: "monday", BackupID: "monday",
		Artifact: "s3://backups/local/data/monday/hub", Attempt: 1}, 3, 3, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning})
	if err := cl.Delete(ctx, fix); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, fix)
	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "monday"}}
	if err := cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reconcileAndRead(ctx, t, cl, backups, b) {
		t.Fatal("backup monday went while the deleteBackup task an older agent made for it runs")
	}
	var tasks v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &tasks, client.InNamespace("data-hub"), client.MatchingLabels{v1alpha1.LabelOperation: "monday"}); err != nil || len(tasks.Items) != 1 {
		t.Fatalf("monday's deleteBackup tasks: %d (%v), want the one the older agent made", len(tasks.Items), err)
	}
}

// TestAnOperationMadeOutsideTheAgentsNamespaceIsRefusedAndRunsNothing:
// people make backups and restores in the agent's namespace (styrminctl,
// RBAC on that namespace). One made in a deployment's namespace, by
// whoever may write there or by a chart the agent applies as itself, was
// acted on like any other: a restore of another environment's data from
// its backup, made by that environment's neighbour. Refused, it still got
// the finalizer, and its deletion deleted the tasks labelled with its
// name: those of the restore or backup of that name in the agent's
// namespace (a scheduled backup's name is easy to guess), a running
// backup's included.
func TestAnOperationMadeOutsideTheAgentsNamespaceIsRefusedAndRunsNothing(t *testing.T) {
	t.Parallel()
	ctx, cl, r, opts := restoring(t)
	rs := &v1alpha1.StyrminRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: "data-hub", Name: "from-a-chart"},
		Spec:       v1alpha1.StyrminRestoreSpec{Backup: "monday"},
	}
	if err := cl.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	reconcileTimes(ctx, t, cl, r, rs, 2)
	if rs.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(rs.Status.Message, "metadata.namespace") || !strings.Contains(rs.Status.Message, "styrmin-system") {
		t.Fatalf("a restore in data-hub: %s %q; want it refused naming metadata.namespace and the agent's namespace", rs.Status.Phase, rs.Status.Message)
	}
	if len(rs.Finalizers) != 0 {
		t.Fatalf("the refused restore in data-hub has finalizers %v, want none: its deletion has no task of its own to wait for", rs.Finalizers)
	}
	var tasks v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &tasks, client.InNamespace("data-hub")); err != nil || len(tasks.Items) != 0 {
		t.Fatalf("hub's tasks after the refusal: %d (%v), want none", len(tasks.Items), err)
	}

	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "data-hub", Name: "tuesday", Finalizers: []string{operation.Finalizer}},
		Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	reconcileTimes(ctx, t, cl, backups, b, 2)
	if b.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(b.Status.Message, "metadata.namespace") {
		t.Fatalf("a backup in data-hub: %s %q; want it refused naming metadata.namespace", b.Status.Phase, b.Status.Message)
	}
	if err := cl.List(ctx, &tasks, client.InNamespace("data-hub")); err != nil || len(tasks.Items) != 0 {
		t.Fatalf("hub's tasks after the backup's refusal: %d (%v), want none", len(tasks.Items), err)
	}

	// The agent's namespace holds a failed restore and a running backup of
	// the same names, each with its task.
	newRestore(ctx, t, cl, "from-a-chart", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationFailed, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-restore-from-a-chart-1", Attempt: 1, Phase: v1alpha1.OperationFailed}}})
	now := metav1.Now()
	restoreTask := newOperationTask(ctx, t, cl, "hub-restore-from-a-chart-1", v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: "from-a-chart",
		BackupID: "monday", Artifact: "s3://backups/local/data/monday/hub", Attempt: 1}, 3, 3,
		v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskFailed, StartedAt: &now, FinishedAt: &now, Message: "the restore failed"})
	newBackup(ctx, t, cl, "tuesday", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationRunning, Location: "s3://backups/local/data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-backup-tuesday-1", Phase: v1alpha1.OperationRunning,
			Artifact: "s3://backups/local/data/tuesday/hub", Sequence: 3}}})
	backupTask := newOperationTask(ctx, t, cl, "hub-backup-tuesday-1", v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: "tuesday",
		BackupID: "tuesday", Artifact: "s3://backups/local/data/tuesday/hub", Attempt: 1}, 3, 3,
		v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, StartedAt: &now})

	// The foreign backup keeps the finalizer an older agent gave it before
	// refusing it.
	b.Finalizers = []string{operation.Finalizer}
	if err := cl.Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		obj client.Object
		r   reconcile.Reconciler
	}{{rs, r}, {b, backups}} {
		if err := cl.Delete(ctx, o.obj); err != nil {
			t.Fatal(err)
		}
		if reconcileAndRead(ctx, t, cl, o.r, o.obj) {
			t.Fatalf("%s/%s, deleted, is still there: finalizers %v", o.obj.GetNamespace(), o.obj.GetName(), o.obj.GetFinalizers())
		}
	}
	for _, tk := range []*v1alpha1.StyrminTask{restoreTask, backupTask} {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(tk), tk); err != nil {
			t.Fatalf("task %s/%s of the operation of that name in styrmin-system, after the deletion of the one in data-hub: %v", tk.Namespace, tk.Name, err)
		}
	}
}

// TestARetryWhosePreviousAttemptsTaskIsGoneTakesTheOlderAttemptsPlace: a
// restore's retry goes where its failed attempt stood among the
// deployment's changes, before the changes its failure holds. With the
// previous attempt's task deleted by hand, the retry went after those
// changes instead, which waited for it while it waited for them.
func TestARetryWhosePreviousAttemptsTaskIsGoneTakesTheOlderAttemptsPlace(t *testing.T) {
	t.Parallel()
	ctx, cl, r, _ := restoring(t)
	newHubChange4(ctx, t, cl)
	first := v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: "fix", BackupID: "monday", Artifact: "s3://backups/local/data/monday/hub", Attempt: 1}
	newOperationTask(ctx, t, cl, task.OperationTaskName("hub", v1alpha1.OperationRestore, "fix", 1), first, 3, 3, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskFailed})
	// Attempt 2 failed too, and its task was deleted since; attempt 3 is
	// planned.
	third := task.OperationTaskName("hub", v1alpha1.OperationRestore, "fix", 3)
	fix := newRestore(ctx, t, cl, "fix", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationRunning, Environment: "data", ObservedRetry: "2",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: third, Attempt: 3,
			Phase: v1alpha1.OperationPending, Artifact: "s3://backups/local/data/monday/hub", Sequence: 3}}})
	fix.Spec.Retry = "2"
	if err := cl.Update(ctx, fix); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, fix)
	var retry v1alpha1.StyrminTask
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "data-hub", Name: third}, &retry); err != nil {
		t.Fatalf("the third attempt's task: %v", err)
	}
	if retry.Spec.ToSequence != 3 {
		t.Errorf("the third attempt goes at sequence %d, want 3, the first attempt's place before change 4", retry.Spec.ToSequence)
	}
}

// newHubChange4 creates hub's change task to sequence 4, which a failed
// restore at sequence 3 holds.
func newHubChange4(ctx context.Context, t *testing.T, cl client.Client) {
	t.Helper()
	newHubChange4In(ctx, t, cl, "data-hub")
}

// newHubChange4In is newHubChange4 for hub in namespace.
func newHubChange4In(ctx context.Context, t *testing.T, cl client.Client, namespace string) {
	t.Helper()
	change := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "hub-4", Labels: hubID().Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: hubID(), Namespace: namespace, Workflow: v1alpha1.WorkflowUpdate, FromSequence: 3, ToSequence: 4,
			Lock: v1alpha1.LockRef{Commit: "c4", Path: "locks/local/data/hub.lock.yaml"}},
	}
	if err := cl.Create(ctx, change); err != nil {
		t.Fatal(err)
	}
}

// reconcileTimes reconciles obj n times with r, then reads it again.
func reconcileTimes(ctx context.Context, t *testing.T, cl client.Client, r reconcile.Reconciler, obj client.Object, n int) {
	t.Helper()
	for range n {
		_, _ = r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
}

// TestABackupOfTheWholeEnvironmentSkipsADeploymentBeingDeleted pins what
// a deployment being deleted does to its environment's backup: it is
// skipped, saying why, and the others are backed up. Its tombstone (held
// while its uninstall runs or retries) refused the whole backup, so the
// nightly backup failed for every deployment of the environment.
func TestABackupOfTheWholeEnvironmentSkipsADeploymentBeingDeleted(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		return []resolver.EnvironmentBackups{{Cluster: "local", Environment: "data", Location: "pvc://backups/data"}}, nil
	})
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "data-web"}}); err != nil {
		t.Fatal(err)
	}
	newClaim(ctx, t, cl, "data-hub", "backups")
	web := v1alpha1.DeploymentID{Cluster: "local", Environment: "data", Name: "web"}
	if err := cl.Create(ctx, &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "data-web", Name: "web", Labels: web.Labels()},
		Spec: v1alpha1.StyrminDeploymentSpec{Kind: v1alpha1.KindTombstone, Deployment: web, Sequence: 5, Digest: "sha256:" + strings.Repeat("cd", 32)}}); err != nil {
		t.Fatal(err)
	}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "nightly"}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, backups, b)
	if b.Status.Phase != v1alpha1.OperationRunning || len(b.Status.Deployments) != 1 || b.Status.Deployments[0].Name != "hub" {
		t.Fatalf("a backup of data while web is being deleted: %s %q, deployments %+v; want it running for hub", b.Status.Phase, b.Status.Message, b.Status.Deployments)
	}
	if len(b.Status.Skipped) != 1 || !strings.HasPrefix(b.Status.Skipped[0], "web: ") || !strings.Contains(b.Status.Skipped[0], "being deleted") {
		t.Fatalf("the backup's skipped: %q, want web, saying it is being deleted", b.Status.Skipped)
	}
	var hubTask v1alpha1.StyrminTask
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "data-hub", Name: b.Status.Deployments[0].Task}, &hubTask); err != nil {
		t.Fatalf("hub's backup task: %v", err)
	}
	var webTasks v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &webTasks, client.InNamespace("data-web")); err != nil || len(webTasks.Items) != 0 {
		t.Fatalf("web's tasks: %d (%v), want none", len(webTasks.Items), err)
	}
}

// TestARestoreWhoseJobsCouldNotBeGivenItsCredentialsIsRefusedBeforeItStops
// pins the check of a restore's credentials: the Secret git names for the
// environment is checked as a backup's start checks it, before any task
// is made. Unchecked, a Secret not marked for backups, or without the
// keys an s3:// location needs, let the restore run its pre step (which
// stops the deployment's components), then fail as its job was given the
// credentials, leaving the deployment stopped and its changes held. A
// retry is checked alike.
func TestARestoreWhoseJobsCouldNotBeGivenItsCredentialsIsRefusedBeforeItStops(t *testing.T) {
	t.Parallel()
	ctx, cl, r, _ := restoring(t)
	var s corev1.Secret
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "styrmin-system", Name: "backup-credentials"}, &s); err != nil {
		t.Fatal(err)
	}
	noTasks := func(what string) {
		t.Helper()
		var tasks v1alpha1.StyrminTaskList
		if err := cl.List(ctx, &tasks, client.InNamespace("data-hub")); err != nil || len(tasks.Items) != 0 {
			t.Fatalf("hub's tasks after %s: %d (%v), want none", what, len(tasks.Items), err)
		}
	}
	refused := func(rs *v1alpha1.StyrminRestore, want ...string) {
		t.Helper()
		stalled := apimeta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionStalled)
		if rs.Status.Phase != v1alpha1.OperationFailed || stalled == nil || stalled.Status != metav1.ConditionTrue {
			t.Fatalf("restore %s: %s, Stalled %+v; want it Failed and Stalled", rs.Name, rs.Status.Phase, stalled)
		}
		for _, w := range want {
			if !strings.Contains(rs.Status.Message, w) || !strings.Contains(stalled.Message, w) {
				t.Errorf("restore %s: message %q, Stalled %q; want both saying %q", rs.Name, rs.Status.Message, stalled.Message, w)
			}
		}
	}

	delete(s.Labels, task.LabelBackupCredentials)
	if err := cl.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	unmarked := newRestore(ctx, t, cl, "unmarked", "monday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, r, unmarked)
	refused(unmarked, "refused: ", "styrmin-system/backup-credentials", "is not labelled "+task.LabelBackupCredentials+"=true")
	noTasks("the refusal of a restore whose Secret is not marked for backups")

	s.Labels = map[string]string{task.LabelBackupCredentials: "true"}
	delete(s.Data, "AWS_SECRET_ACCESS_KEY")
	if err := cl.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	noKey := newRestore(ctx, t, cl, "no-key", "monday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, r, noKey)
	refused(noKey, "refused: ", "backups.secret styrmin-system/backup-credentials has no key AWS_SECRET_ACCESS_KEY")
	noTasks("the refusal of a restore whose Secret lacks a key")

	failed := newRestore(ctx, t, cl, "failed", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationFailed, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-restore-failed-1", Attempt: 1, Phase: v1alpha1.OperationFailed,
			Artifact: "s3://backups/local/data/monday/hub", Sequence: 3}}})
	retryRestore(ctx, t, cl, r, failed, "1")
	refused(failed, "retry refused: ", "has no key AWS_SECRET_ACCESS_KEY")
	if failed.Status.ObservedRetry != "1" || failed.Status.Deployments[0].Attempt != 1 {
		t.Errorf("the refused retry: observed %q, attempt %d; want the retry observed and no new attempt", failed.Status.ObservedRetry, failed.Status.Deployments[0].Attempt)
	}
	noTasks("the refusal of a retry whose Secret lacks a key")
}

// newClaim creates PersistentVolumeClaim namespace/name (left unbound: no
// volume is provisioned here).
func newClaim(ctx context.Context, t *testing.T, cl client.Client, namespace, name string) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if err := cl.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
}

// TestARestoreFromAPVCWhoseClaimIsMissingIsRefusedBeforeItStops pins the
// check of a pvc:// location's claim: each deployment's jobs mount it
// from the deployment's own namespace. Unchecked, a restore whose claim
// was not there ran its pre step (which stops the deployment's
// components), then its job's pod waited Pending for the claim until the
// step timed out, 30 minutes later: the restore failed, the components
// stayed stopped and the deployment's changes held. A retry, and a
// backup to such a location, are checked alike; once the claim is there
// each starts.
func TestARestoreFromAPVCWhoseClaimIsMissingIsRefusedBeforeItStops(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		return []resolver.EnvironmentBackups{{Cluster: "local", Environment: "data", Location: "pvc://backups/data"}}, nil
	})
	restores, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	artifact := "pvc://backups/data/tuesday/hub"
	newBackup(ctx, t, cl, "tuesday", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "pvc://backups/data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-backup-tuesday-1", Phase: v1alpha1.OperationSucceeded,
			Artifact: artifact, Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}})
	noTasks := func(what string) {
		t.Helper()
		var tasks v1alpha1.StyrminTaskList
		if err := cl.List(ctx, &tasks, client.InNamespace("data-hub")); err != nil || len(tasks.Items) != 0 {
			t.Fatalf("hub's tasks after %s: %d (%v), want none", what, len(tasks.Items), err)
		}
	}
	refused := func(what string, phase v1alpha1.OperationPhase, msg string, conds []metav1.Condition, prefix string) {
		t.Helper()
		stalled := apimeta.FindStatusCondition(conds, v1alpha1.ConditionStalled)
		if phase != v1alpha1.OperationFailed || stalled == nil || stalled.Status != metav1.ConditionTrue {
			t.Fatalf("%s: %s, Stalled %+v; want it Failed and Stalled", what, phase, stalled)
		}
		for _, w := range []string{prefix, "deployment hub", "no PersistentVolumeClaim backups in data-hub", "expected the claim in each deployment's namespace"} {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: message %q, want it saying %q", what, msg, w)
			}
		}
	}

	rs := newRestore(ctx, t, cl, "from-tuesday", "tuesday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, restores, rs)
	refused("a restore from a claim data-hub lacks", rs.Status.Phase, rs.Status.Message, rs.Status.Conditions, "refused: ")
	if len(rs.Status.Deployments) != 0 {
		t.Fatalf("the refused restore plans %+v, want nothing: it holds no deployment", rs.Status.Deployments)
	}
	noTasks("the refusal of a restore whose claim is missing")

	failed := newRestore(ctx, t, cl, "failed", "tuesday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationFailed, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-restore-failed-1", Attempt: 1, Phase: v1alpha1.OperationFailed,
			Artifact: artifact, Sequence: 3}}})
	retryRestore(ctx, t, cl, restores, failed, "1")
	refused("the retry of a restore from a claim data-hub lacks", failed.Status.Phase, failed.Status.Message, failed.Status.Conditions, "retry refused: ")
	if failed.Status.Deployments[0].Attempt != 1 {
		t.Errorf("the refused retry made attempt %d, want none", failed.Status.Deployments[0].Attempt)
	}
	noTasks("the refusal of a retry whose claim is missing")

	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "nightly"}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, backups, b)
	refused("a backup to a claim data-hub lacks", b.Status.Phase, b.Status.Message, b.Status.Conditions, "refused: ")
	noTasks("the refusal of a backup whose claim is missing")

	newClaim(ctx, t, cl, "data-hub", "backups")
	again := newRestore(ctx, t, cl, "again", "tuesday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, restores, again)
	if again.Status.Phase != v1alpha1.OperationRunning || len(again.Status.Deployments) != 1 {
		t.Fatalf("a restore once data-hub holds the claim: %s %q, want it Running for hub", again.Status.Phase, again.Status.Message)
	}
	next := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "nightly-2"}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}}
	if err := cl.Create(ctx, next); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, backups, next)
	if next.Status.Phase != v1alpha1.OperationRunning || len(next.Status.Deployments) != 1 {
		t.Fatalf("a backup once data-hub holds the claim: %s %q, want it Running for hub", next.Status.Phase, next.Status.Message)
	}
}

// TestAWholeEnvironmentBackupSkipsADeploymentWhoseClaimIsMissing pins
// what a deployment whose namespace lacks a pvc:// location's claim does
// to its environment's backup: like one whose driver cannot back up, it
// is skipped, saying the namespace and the claim, and the others are
// backed up. A deployment added without the claim refused every backup
// of its environment, each nightly one with no task at all. A backup
// that names it is refused.
func TestAWholeEnvironmentBackupSkipsADeploymentWhoseClaimIsMissing(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		return []resolver.EnvironmentBackups{{Cluster: "local", Environment: "data", Location: "pvc://backups/data"}}, nil
	})
	newClaim(ctx, t, cl, "data-hub", "backups")
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "data-web2"}}); err != nil {
		t.Fatal(err)
	}
	newRunning(ctx, t, cl, "data-web2", "web2")
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	tasksOf := func(backup string) []v1alpha1.StyrminTask {
		t.Helper()
		var list v1alpha1.StyrminTaskList
		if err := cl.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelOperation: backup}); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}

	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "nightly"}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, backups, b)
	if b.Status.Phase != v1alpha1.OperationRunning || len(b.Status.Deployments) != 1 || b.Status.Deployments[0].Name != "hub" {
		t.Fatalf("a backup of data while data-web2 lacks the claim: %s %q, deployments %+v; want it running for hub", b.Status.Phase, b.Status.Message, b.Status.Deployments)
	}
	if len(b.Status.Skipped) != 1 || !strings.HasPrefix(b.Status.Skipped[0], "web2: ") || !strings.Contains(b.Status.Skipped[0], "no PersistentVolumeClaim backups in data-web2") {
		t.Fatalf("the backup's skipped: %q, want web2, saying data-web2 has no claim backups", b.Status.Skipped)
	}
	if ts := tasksOf(b.Name); len(ts) != 1 || ts[0].Namespace != "data-hub" {
		t.Fatalf("the backup's tasks: %d, want hub's alone", len(ts))
	}

	named := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "both"},
		Spec: v1alpha1.StyrminBackupSpec{Environment: "data", Deployments: []string{"hub", "web2"}}}
	if err := cl.Create(ctx, named); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, backups, named)
	if named.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(named.Status.Message, "refused: ") ||
		!strings.Contains(named.Status.Message, "deployment web2") || !strings.Contains(named.Status.Message, "no PersistentVolumeClaim backups in data-web2") {
		t.Fatalf("a backup naming web2: %s %q, want it refused, saying data-web2 has no claim backups", named.Status.Phase, named.Status.Message)
	}
	if ts := tasksOf(named.Name); len(ts) != 0 {
		t.Fatalf("the refused backup's tasks: %d, want none", len(ts))
	}
}

// TestARestoresRetryChecksTheClaimWhereItsTaskWillBeMade pins where a
// retry looks for a pvc:// artefact's claim: in its deployment's
// namespace now, where the retry's task is made, not in the one the
// restore recorded. Hub removed and added back under another
// namespacePrefix between the restore and its retry passed the check on
// the old namespace's claim; its job would then wait Pending in the new
// one, after its pre step had stopped hub's components.
func TestARestoresRetryChecksTheClaimWhereItsTaskWillBeMade(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		return []resolver.EnvironmentBackups{{Cluster: "local", Environment: "data", Location: "pvc://backups/data"}}, nil
	})
	restores, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	newClaim(ctx, t, cl, "data-hub", "backups")
	artifact := "pvc://backups/data/tuesday/hub"
	newBackup(ctx, t, cl, "tuesday", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "pvc://backups/data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-backup-tuesday-1", Phase: v1alpha1.OperationSucceeded,
			Artifact: artifact, Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}})
	failed := newRestore(ctx, t, cl, "failed", "tuesday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationFailed, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-restore-failed-1", Attempt: 1, Phase: v1alpha1.OperationFailed,
			Artifact: artifact, Sequence: 3}}})
	moveHub(ctx, t, cl, "data-hub", "new-ns")
	tasks := func() []v1alpha1.StyrminTask {
		t.Helper()
		var list v1alpha1.StyrminTaskList
		if err := cl.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelOperation: failed.Name}); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}

	retryRestore(ctx, t, cl, restores, failed, "1")
	if failed.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(failed.Status.Message, "retry refused: ") ||
		!strings.Contains(failed.Status.Message, "no PersistentVolumeClaim backups in new-ns") {
		t.Fatalf("the retry while new-ns lacks the claim: %s %q, want it refused, saying new-ns has no claim backups", failed.Status.Phase, failed.Status.Message)
	}
	if ts := tasks(); len(ts) != 0 {
		t.Fatalf("the refused retry's tasks: %d, want none", len(ts))
	}

	newClaim(ctx, t, cl, "new-ns", "backups")
	retryRestore(ctx, t, cl, restores, failed, "2")
	if failed.Status.Phase != v1alpha1.OperationRunning || failed.Status.Deployments[0].Attempt != 2 {
		t.Fatalf("the retry once new-ns holds the claim: %s %q, attempt %d; want it Running its second attempt", failed.Status.Phase, failed.Status.Message, failed.Status.Deployments[0].Attempt)
	}
	if ts := tasks(); len(ts) != 1 || ts[0].Namespace != "new-ns" {
		t.Fatalf("the retry's tasks: %d, want one, in new-ns", len(ts))
	}
}

// TestASharedLocationRefusesOnlyNewBackupsAndRestoresOfItsEnvironment:
// local/data backs up where eu's data does too, so the two agents give
// the same backup IDs. A new backup, a restore and a restore's retry of
// it are refused before any task is made, naming the file and the field;
// the deletion of a backup it has goes on (the refusal was the
// environment's Err, which held every deletion of the cluster).
func TestASharedLocationRefusesOnlyNewBackupsAndRestoresOfItsEnvironment(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	shared := &resolver.ConfigError{File: "clusters/local/cluster.cue", Line: 4, Field: "backupLocation",
		Msg: `"s3://backups/shared", the backup location of local/data, is also that of eu/data (set in clusters/eu/cluster.cue:4)`}
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		return []resolver.EnvironmentBackups{{Cluster: "local", Environment: "data", Location: "s3://backups/shared", Secret: "backup-credentials", LocationErr: shared}}, nil
	})
	restores, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what string, phase v1alpha1.OperationPhase, msg string, conds []metav1.Condition, prefix string) {
		t.Helper()
		stalled := apimeta.FindStatusCondition(conds, v1alpha1.ConditionStalled)
		if phase != v1alpha1.OperationFailed || stalled == nil || stalled.Status != metav1.ConditionTrue {
			t.Fatalf("%s: %s %q, Stalled %+v; want it Failed and Stalled", what, phase, msg, stalled)
		}
		for _, w := range []string{prefix, "local/data", "clusters/local/cluster.cue:4", "field backupLocation", "eu/data", "give it a location of its own"} {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: message %q, want it saying %q", what, msg, w)
			}
		}
		var tasks v1alpha1.StyrminTaskList
		if err := cl.List(ctx, &tasks, client.InNamespace("data-hub")); err != nil || len(tasks.Items) != 0 {
			t.Fatalf("hub's tasks after %s: %d (%v), want none", what, len(tasks.Items), err)
		}
	}

	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "nightly"}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, backups, b)
	refused("a backup to the shared location", b.Status.Phase, b.Status.Message, b.Status.Conditions, "refused: ")

	rs := newRestore(ctx, t, cl, "from-monday", "monday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, restores, rs)
	refused("a restore of the environment", rs.Status.Phase, rs.Status.Message, rs.Status.Conditions, "refused: ")

	failed := newRestore(ctx, t, cl, "failed", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationFailed, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-restore-failed-1", Attempt: 1, Phase: v1alpha1.OperationFailed,
			Artifact: "s3://backups/local/data/monday/hub", Sequence: 3}}})
	retryRestore(ctx, t, cl, restores, failed, "1")
	refused("the retry of a restore of the environment", failed.Status.Phase, failed.Status.Message, failed.Status.Conditions, "retry refused: ")

	monday := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "monday"}}
	if err := cl.Delete(ctx, monday); err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, backups, monday) {
		t.Fatalf("the deletion of backup monday of the environment waits: %+v", monday.Status.Conditions)
	}
}

// moveHub removes hub's StyrminDeployment from namespace from and adds it
// back, as it ran, in namespace to (made here): hub removed from git and
// added again under another namespacePrefix.
func moveHub(ctx context.Context, t *testing.T, cl client.Client, from, to string) {
	t.Helper()
	var old v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, client.ObjectKey{Namespace: from, Name: "hub"}, &old); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, &old); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: to}}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: to, Name: "hub", Labels: hubID().Labels()}, Spec: old.Spec}); err != nil {
		t.Fatal(err)
	}
}
