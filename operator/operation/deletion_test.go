package operation_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// deletionWaits reconciles backup b, being deleted, and fails unless it
// stays with a Reconciling condition of reason saying each of want.
func deletionWaits(ctx context.Context, t *testing.T, cl client.Client, r *operation.BackupReconciler, b *v1alpha1.StyrminBackup, reason string, want ...string) {
	t.Helper()
	if !reconcileAndRead(ctx, t, cl, r, b) {
		t.Fatalf("backup %s went at its deletion; want it to wait (%s, %q)", b.Name, reason, want)
	}
	c := apimeta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReconciling)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
		t.Fatalf("backup %s being deleted: Reconciling %+v, want True, %s", b.Name, c, reason)
	}
	for _, w := range want {
		if !strings.Contains(c.Message, w) {
			t.Fatalf("backup %s being deleted says %q, want it to say %q", b.Name, c.Message, w)
		}
	}
}

// TestABackupsDeletionWaitsForTheCreatesOfAnEnvironmentClonedFromIt pins
// what a backup deleted by hand waits for besides restores: the
// environments git declares cloned from it, whose deployments restore it
// in their create's setup hook. Retention kept such a backup, but a
// deletion right after `env clone --from-backup … --commit` let its
// artefacts go before the creates ran, and the clone started empty (its
// create finds no StyrminBackup and checks nothing). The deletion waits,
// naming the clone, until the creates that restore it have ended.
func TestABackupsDeletionWaitsForTheCreatesOfAnEnvironmentClonedFromIt(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		return []resolver.EnvironmentBackups{
			{Cluster: "local", Environment: "data", Location: "s3://backups/local/data"},
			{Cluster: "local", Environment: "preview", Location: "s3://backups/local/preview", ClonedFrom: &resolver.CloneSource{
				Cluster: "local", Environment: "data", Commit: "abcdef1", Backup: "monday", Location: "s3://backups/local/data", Deployments: []string{"hub"}}},
		}, nil
	})
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "preview-hub"}}); err != nil {
		t.Fatal(err)
	}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "monday"}}
	if err := cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}

	// The clone is committed; the agent has not made its tasks yet.
	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletionWaitsForClone, "environment local/preview (not created yet)", "cloned from this backup")

	// Its create's task is made, then planned: its setup hook restores
	// monday (the steps as expandSteps plans them).
	preview := v1alpha1.DeploymentID{Cluster: "local", Environment: "preview", Name: "hub"}
	create := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: "preview-hub", Name: v1alpha1.TaskName("hub", 1), Labels: preview.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: preview, Namespace: "preview-hub", Workflow: v1alpha1.WorkflowCreate, ToSequence: 1,
			Lock: v1alpha1.LockRef{Commit: "c1", Path: "locks/local/preview/hub.lock.yaml"}},
	}
	if err := cl.Create(ctx, create); err != nil {
		t.Fatal(err)
	}
	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletionWaitsForClone, "environment local/preview (deployments hub)")
	restore := map[string]string{"operation": "restore", "backupID": "monday", "artifact": "s3://backups/local/data/monday/hub"}
	create.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, Workflow: v1alpha1.WorkflowCreate, Steps: []v1alpha1.TaskStep{
		{Name: "create/core/1:upgradeDeploymentVersion", Hook: "create", Mode: "core", Action: string(drivers.ActionUpgradeDeploymentVersion), State: v1alpha1.StepSucceeded},
		{Name: "setup/post/1:restoreBackup/restore/core/1:runJob", Hook: "setup", Mode: "post", Action: string(drivers.ActionRunJob), Args: restore, State: v1alpha1.StepPending},
	}}
	if err := cl.Status().Update(ctx, create); err != nil {
		t.Fatal(err)
	}
	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletionWaitsForClone, "environment local/preview (deployments hub)")
	var tasks v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &tasks, client.MatchingLabels{v1alpha1.LabelOperation: "monday"}); err != nil || len(tasks.Items) != 0 {
		t.Fatalf("monday's deleteBackup tasks while the clone's create restores it: %d (%v), want none", len(tasks.Items), err)
	}

	// The restore ran: the create goes on without it, and the backup goes.
	create.Status.Steps[1].State = v1alpha1.StepSucceeded
	if err := cl.Status().Update(ctx, create); err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, backups, b) {
		t.Fatalf("backup monday stays once the clone's create restored it: %+v", b.Status.Conditions)
	}
}

// TestABackupsDeletionWaitsForNoCreateOfACloneThatRestoresNone pins a
// clone whose clonedFrom.deployments is empty (every name taken out: each
// deployment created empty): its creates restore nothing, as the resolver
// reads it, but the deletion of the backup read the empty list as a clone
// written before the list (every deployment restores) and waited for
// creates that never read it, saying they did. A clone without the list
// still waits.
func TestABackupsDeletionWaitsForNoCreateOfACloneThatRestoresNone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		restore []string
		waits   bool
	}{
		{"an empty list: none restores", []string{}, false},
		{"no list (a clone written before it): all restore", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cl, _, opts := restoring(t)
			opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
				return []resolver.EnvironmentBackups{
					{Cluster: "local", Environment: "data", Location: "s3://backups/local/data"},
					{Cluster: "local", Environment: "preview", Location: "s3://backups/local/preview", ClonedFrom: &resolver.CloneSource{
						Cluster: "local", Environment: "data", Commit: "abcdef1", Backup: "monday", Location: "s3://backups/local/data", Deployments: tc.restore}},
				}, nil
			})
			if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "preview-hub"}}); err != nil {
				t.Fatal(err)
			}
			// Hub's create, not planned yet.
			preview := v1alpha1.DeploymentID{Cluster: "local", Environment: "preview", Name: "hub"}
			if err := cl.Create(ctx, &v1alpha1.StyrminTask{
				ObjectMeta: metav1.ObjectMeta{Namespace: "preview-hub", Name: v1alpha1.TaskName("hub", 1), Labels: preview.Labels()},
				Spec: v1alpha1.StyrminTaskSpec{Deployment: preview, Namespace: "preview-hub", Workflow: v1alpha1.WorkflowCreate, ToSequence: 1,
					Lock: v1alpha1.LockRef{Commit: "c1", Path: "locks/local/preview/hub.lock.yaml"}},
			}); err != nil {
				t.Fatal(err)
			}
			backups, err := operation.NewBackupReconciler(opts)
			if err != nil {
				t.Fatal(err)
			}
			b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "monday"}}
			if err := cl.Delete(ctx, b); err != nil {
				t.Fatal(err)
			}
			if tc.waits {
				deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletionWaitsForClone, "environment local/preview (deployments hub)")
				return
			}
			if reconcileAndRead(ctx, t, cl, backups, b) {
				t.Fatalf("backup monday stays, a clone that restores none of it named: %+v", b.Status.Conditions)
			}
		})
	}
}

// deletingDriver is backupDriver with a deleteBackup hook.
type deletingDriver struct{}

func (deletingDriver) Driver(ctx context.Context, req driversource.Request) (*drivers.Driver, error) {
	d, err := backupDriver{}.Driver(ctx, req)
	if err != nil {
		return nil, err
	}
	d.Hooks[drivers.HookDeleteBackup] = drivers.Modes{Core: []drivers.Step{{Action: drivers.ActionRunJob, Component: "db", Job: "rm"}}}
	return d, nil
}

// TestADeletedBackupDeletesTheArtefactOfATaskThatSucceededBeforeItsStatusSaidSo
// pins which artefacts a backup's deletion deletes: those its tasks
// wrote, whatever its status recorded. It went by the status alone, so a
// backup deleted while its status still said Running (its task had
// succeeded, and the agent restarted before recording it) made no
// deleteBackup task, then deleted the tasks: the artefact stayed, recorded
// nowhere. The deletion waits for a task that runs, deletes the artefact
// of one that succeeded, and deletes a task that has not started.
func TestADeletedBackupDeletesTheArtefactOfATaskThatSucceededBeforeItsStatusSaidSo(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	opts.Drivers = deletingDriver{}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	backupTask := func(b string, status v1alpha1.StyrminTaskStatus) (*v1alpha1.StyrminBackup, *v1alpha1.StyrminTask) {
		t.Helper()
		name := task.OperationTaskName("hub", v1alpha1.OperationBackup, b, 1)
		art := "s3://backups/local/data/" + b + "/hub"
		d := v1alpha1.OperationDeployment{Name: "hub", Namespace: "data-hub", Task: name, Phase: v1alpha1.OperationPending, Artifact: art, Sequence: 3,
			Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}
		if status.StartedAt != nil {
			d.Phase, d.StartedAt = v1alpha1.OperationRunning, status.StartedAt
		}
		bk, _ := newBackup(ctx, t, cl, b, v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationRunning, Location: "s3://backups/local/data",
			StartedAt: status.StartedAt, Deployments: []v1alpha1.OperationDeployment{d}})
		tk := newOperationTask(ctx, t, cl, name, v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: b, BackupID: b, Artifact: art, Attempt: 1}, 3, 3, status)
		if err := cl.Delete(ctx, bk); err != nil {
			t.Fatal(err)
		}
		return bk, tk
	}
	deleteTask := func(b string) *v1alpha1.StyrminTask {
		t.Helper()
		var tasks v1alpha1.StyrminTaskList
		if err := cl.List(ctx, &tasks, client.InNamespace("data-hub"), client.MatchingLabels{v1alpha1.LabelOperation: b}); err != nil {
			t.Fatal(err)
		}
		for i := range tasks.Items {
			if op := tasks.Items[i].Spec.Operation; op.Kind == v1alpha1.OperationDeleteBackup {
				return &tasks.Items[i]
			}
		}
		return nil
	}

	// Nightly's task runs as it is deleted: the deletion waits for it.
	now := metav1.Now()
	nightly, running := backupTask("nightly", v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, Workflow: v1alpha1.WorkflowBackup, StartedAt: &now})
	deletionWaits(ctx, t, cl, backups, nightly, v1alpha1.ReasonDeletionWaitsForBackupTasks, "backup tasks of hub")
	if d := deleteTask("nightly"); d != nil {
		t.Fatalf("a deleteBackup task %s while hub's backup runs: its artefact is not written yet", d.Name)
	}

	// It succeeds; nightly's status still says Running (the agent
	// restarted before recording it).
	running.Status.Phase, running.Status.FinishedAt = v1alpha1.TaskSucceeded, &now
	if err := cl.Status().Update(ctx, running); err != nil {
		t.Fatal(err)
	}
	deletionWaits(ctx, t, cl, backups, nightly, v1alpha1.ReasonDeletingArtifacts, "deleting the artefacts of hub")
	del := deleteTask("nightly")
	if del == nil || del.Spec.Operation.Artifact != "s3://backups/local/data/nightly/hub" {
		t.Fatalf("hub's deleteBackup task for nightly: %+v, want one deleting s3://backups/local/data/nightly/hub", del)
	}
	del.Status.Phase = v1alpha1.TaskSucceeded
	if err := cl.Status().Update(ctx, del); err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, backups, nightly) {
		t.Fatalf("backup nightly stays once its artefact is deleted: %+v", nightly.Status.Conditions)
	}

	// Weekly's task has not started: it is deleted, never to write an
	// artefact, and the backup goes without waiting.
	weekly, pending := backupTask("weekly", v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskPending, Workflow: v1alpha1.WorkflowBackup})
	if reconcileAndRead(ctx, t, cl, backups, weekly) {
		t.Fatalf("backup weekly, whose task has not started, stays at its deletion: %+v", weekly.Status.Conditions)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(pending), pending); err == nil {
		t.Fatalf("weekly's task %s is left after weekly went", pending.Name)
	}
	if d := deleteTask("weekly"); d != nil {
		t.Fatalf("a deleteBackup task %s for weekly, whose task never ran", d.Name)
	}
}

// TestADeletedRestoreWaitsForItsTaskThatRuns pins what deleting a
// restore does while its task runs: it waits. It went at once and
// deleted the task, whose job is no object of the task's: the restore
// (a `pg_restore --clean`) ran on, the hold on hub was released and its
// waiting changes started beside it, and the components the hook stopped
// stayed stopped. It goes once the task has ended.
func TestADeletedRestoreWaitsForItsTaskThatRuns(t *testing.T) {
	t.Parallel()
	ctx, cl, restores, _ := restoring(t)
	name := task.OperationTaskName("hub", v1alpha1.OperationRestore, "back-to-monday", 1)
	rs := newRestore(ctx, t, cl, "back-to-monday", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationRunning, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: name, Attempt: 1, Phase: v1alpha1.OperationRunning,
			Artifact: "s3://backups/local/data/monday/hub", Sequence: 3}}})
	now := metav1.Now()
	running := newOperationTask(ctx, t, cl, name, v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: rs.Name, BackupID: "monday",
		Artifact: "s3://backups/local/data/monday/hub", Attempt: 1}, 3, 3,
		v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, Workflow: v1alpha1.WorkflowRestore, StartedAt: &now, Steps: []v1alpha1.TaskStep{
			{Name: "restore/core/1:runJob", Hook: "restore", Mode: "core", Action: string(drivers.ActionRunJob), State: v1alpha1.StepRunning, StartedAt: &now}}})
	if err := cl.Delete(ctx, rs); err != nil {
		t.Fatal(err)
	}

	if !reconcileAndRead(ctx, t, cl, restores, rs) {
		t.Fatal("the restore went at its deletion while its task runs")
	}
	if c := apimeta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue ||
		c.Reason != operation.ReasonDeletionWaitsForRestoreTasks || !strings.Contains(c.Message, "restore tasks of hub") {
		t.Fatalf("a restore deleted while its task runs: Reconciling %+v, want True, %s, naming hub", c, operation.ReasonDeletionWaitsForRestoreTasks)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(running), running); err != nil {
		t.Fatalf("hub's restore task, which runs, after its restore's deletion: %v; want it kept until it ends", err)
	}

	running.Status.Phase, running.Status.FinishedAt = v1alpha1.TaskSucceeded, &now
	running.Status.Steps[0].State = v1alpha1.StepSucceeded
	if err := cl.Status().Update(ctx, running); err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, restores, rs) {
		t.Fatalf("the restore stays once its task has ended: %+v", rs.Status.Conditions)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(running), running); err == nil {
		t.Fatalf("hub's restore task %s is left after its restore went", running.Name)
	}
}

// TestADeletedBackupTakenBeforeAnUpgradeDeletesItsArtefact pins the
// deletion of a backup an upgrade took first (labelled with its task): as
// any backup's, it waits for a restore that reads it, then runs the
// driver's deleteBackup hook. It went at once, its artefact left where it
// was, recorded nowhere, and a restore reading it lost its data.
func TestADeletedBackupTakenBeforeAnUpgradeDeletesItsArtefact(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	opts.Drivers = deletingDriver{}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	const art = "s3://backups/local/data/data-hub-before-4-0123456789/hub"
	labels := hubID().Labels()
	labels[task.LabelTask] = "hub-4"
	b := &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "data-hub-before-4-0123456789", Labels: labels, Finalizers: []string{operation.Finalizer}},
		Spec:       v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "data", Deployments: []string{"hub"}},
	}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status = v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "s3://backups/local/data", Message: "taken by task data-hub/hub-4 before its upgrade",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-4", Phase: v1alpha1.OperationSucceeded, Artifact: art,
			Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}}
	if err := cl.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	reading := newRestore(ctx, t, cl, "undo-the-upgrade", b.Name, v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationRunning, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-restore-undo-the-upgrade-1", Phase: v1alpha1.OperationRunning}}})
	if err := cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}

	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletionWaitsForRestore, "StyrminRestore undo-the-upgrade")

	reading.Status.Phase = v1alpha1.OperationSucceeded
	if err := cl.Status().Update(ctx, reading); err != nil {
		t.Fatal(err)
	}
	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletingArtifacts, "deleting the artefacts of hub")
	var tasks v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &tasks, client.InNamespace("data-hub"), client.MatchingLabels{v1alpha1.LabelOperation: b.Name}); err != nil {
		t.Fatal(err)
	}
	if len(tasks.Items) != 1 || tasks.Items[0].Spec.Operation.Kind != v1alpha1.OperationDeleteBackup || tasks.Items[0].Spec.Operation.Artifact != art {
		t.Fatalf("the deletion's tasks: %+v, want hub's deleteBackup task of %s", tasks.Items, art)
	}
	del := &tasks.Items[0]
	del.Status.Phase = v1alpha1.TaskSucceeded
	if err := cl.Status().Update(ctx, del); err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, backups, b) {
		t.Fatalf("the backup stays once its artefact is deleted: %+v", b.Status.Conditions)
	}
}

// TestABackupsDeletionWaitsOnlyForTheUnreadableEnvironmentsOfItsCluster
// pins what a broken environment file holds back of a backup's deletion:
// an environment of the backup's cluster whose settings git cannot give
// may be a clone of it, so the deletion waits, naming the file; a broken
// file of another cluster's environment (which this agent's tasks never
// restore from) holds back nothing.
func TestABackupsDeletionWaitsOnlyForTheUnreadableEnvironmentsOfItsCluster(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	here := &resolver.ConfigError{File: "clusters/local/environments/preview/environment.cue", Line: 3, Field: "clonedFrom.backup", Msg: `"Monday" is no backup ID: expected a DNS-1123 label`}
	there := &resolver.ConfigError{File: "clusters/other/cluster.cue", Line: 1, Field: "backupLocation", Msg: "expected s3://BUCKET[/PREFIX] or pvc://CLAIM[/PATH]"}
	broken := []error{here, there}
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		all := []resolver.EnvironmentBackups{{Cluster: "local", Environment: "data", Location: "s3://backups/local/data"}}
		for _, err := range broken {
			ce := err.(*resolver.ConfigError)
			cluster := strings.Split(ce.File, "/")[1]
			all = append(all, resolver.EnvironmentBackups{Cluster: cluster, Environment: "preview", Err: err})
		}
		return all, errors.Join(broken...)
	})
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "monday"}}
	if err := cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletionWaitsForClone, here.File, "clonedFrom.backup")
	if c := apimeta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReconciling); strings.Contains(c.Message, there.File) {
		t.Fatalf("backup monday's deletion waits for another cluster's file: %q", c.Message)
	}

	broken = []error{there}
	if reconcileAndRead(ctx, t, cl, backups, b) {
		t.Fatalf("backup monday stays with only another cluster's file broken: %+v", b.Status.Conditions)
	}
}

// TestADeletedBackupTakenBeforeItsDeploymentMovedNamespaceGoesOnceItsDeleteTaskEnds
// pins where a backup's deletion looks for its deleteBackup task: where
// it makes it, the deployment's namespace now. An environment's
// namespacePrefix moved (its deployments removed and added back) leaves
// the backups taken before in the old namespace; the task was looked for
// there, never found, made again each pass in the new one and taken as
// running: the backup said DeletingArtifacts after its hook had
// succeeded, and kept its finalizer for ever.
func TestADeletedBackupTakenBeforeItsDeploymentMovedNamespaceGoesOnceItsDeleteTaskEnds(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	opts.Drivers = deletingDriver{}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	// Hub was removed from data-hub and added back in new-ns.
	var old v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "data-hub", Name: "hub"}, &old); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, &old); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "new-ns"}}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "new-ns", Name: "hub", Labels: hubID().Labels()}, Spec: old.Spec}); err != nil {
		t.Fatal(err)
	}
	const art = "s3://backups/local/data/before-the-move/hub"
	b, _ := newBackup(ctx, t, cl, "before-the-move", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "s3://backups/local/data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "old-ns", Task: "hub-backup-before-the-move-1", Phase: v1alpha1.OperationSucceeded,
			Artifact: art, Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}})
	if err := cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}

	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletingArtifacts, "deleting the artefacts of hub")
	var tasks v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &tasks, client.MatchingLabels{v1alpha1.LabelOperation: b.Name}); err != nil {
		t.Fatal(err)
	}
	if len(tasks.Items) != 1 || tasks.Items[0].Namespace != "new-ns" || tasks.Items[0].Spec.Operation.Artifact != art {
		t.Fatalf("the deletion's tasks: %+v, want one deleteBackup task of %s in new-ns", tasks.Items, art)
	}
	del := &tasks.Items[0]
	del.Status.Phase = v1alpha1.TaskSucceeded
	if err := cl.Status().Update(ctx, del); err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, backups, b) {
		t.Fatalf("backup before-the-move stays once its deleteBackup task in new-ns succeeded: finalizers %v, %+v", b.Finalizers, b.Status.Conditions)
	}
}

// recordedEvent is an event a test recorder was given.
type recordedEvent struct {
	regarding, related     runtime.Object
	evType, reason, action string
	note                   string
}

// eventRecorder keeps the events it is given.
type eventRecorder struct{ events []recordedEvent }

func (r *eventRecorder) Eventf(regarding, related runtime.Object, evType, reason, action, note string, args ...any) {
	r.events = append(r.events, recordedEvent{regarding, related, evType, reason, action, fmt.Sprintf(note, args...)})
}

// deleteBackupTask is hub's deleteBackup task of backup (nil when none).
func deleteBackupTask(ctx context.Context, t *testing.T, cl client.Client, backup string) *v1alpha1.StyrminTask {
	t.Helper()
	var tasks v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &tasks, client.InNamespace("data-hub"), client.MatchingLabels{v1alpha1.LabelOperation: backup}); err != nil {
		t.Fatal(err)
	}
	for i := range tasks.Items {
		if op := tasks.Items[i].Spec.Operation; op != nil && op.Kind == v1alpha1.OperationDeleteBackup {
			return &tasks.Items[i]
		}
	}
	return nil
}

// TestADeletedBackupWhoseDeleteTaskFailedNamesTheArtefactItLeft pins
// what a backup's deletion says when its deleteBackup task fails (the
// store unreachable, say): the backup goes, so that retention is never
// held by the store, and finalize deletes the failed task with it. That
// task was the only record of the artefact left behind: with the store
// down for a night, every deletion left data nobody could find. A
// Warning event on the backup and a log line now name the artefact and
// the task's message.
func TestADeletedBackupWhoseDeleteTaskFailedNamesTheArtefactItLeft(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	var logged []string
	ctx = logr.NewContext(ctx, funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))
	rec := &eventRecorder{}
	opts.Drivers, opts.Recorder = deletingDriver{}, rec
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	const art = "s3://backups/local/data/monday/hub"
	const why = "step delete-backup/core/1:runJob (StepFailed) failed: job delete-backup: could not connect to the endpoint URL"
	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "monday"}}
	if err := cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	deletionWaits(ctx, t, cl, backups, b, v1alpha1.ReasonDeletingArtifacts, "deleting the artefacts of hub")
	del := deleteBackupTask(ctx, t, cl, "monday")
	if del == nil || del.Spec.Operation.Artifact != art {
		t.Fatalf("hub's deleteBackup task for monday: %+v, want one deleting %s", del, art)
	}
	now := metav1.Now()
	del.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskFailed, StartedAt: &now, FinishedAt: &now, Message: why}
	if err := cl.Status().Update(ctx, del); err != nil {
		t.Fatal(err)
	}

	if reconcileAndRead(ctx, t, cl, backups, b) {
		t.Fatalf("backup monday stays once its deleteBackup task failed: %+v; want it to go, saying what it left", b.Status.Conditions)
	}
	var left []recordedEvent
	for _, ev := range rec.events {
		if ev.reason == operation.EventArtifactLeft {
			left = append(left, ev)
		}
	}
	if len(left) != 1 {
		t.Fatalf("%s events: %+v, want one naming %s", operation.EventArtifactLeft, rec.events, art)
	}
	ev := left[0]
	if on, ok := ev.regarding.(*v1alpha1.StyrminBackup); !ok || on.Name != "monday" || ev.evType != corev1.EventTypeWarning {
		t.Fatalf("the %s event is a %s one regarding %T %v, want a Warning regarding StyrminBackup monday", ev.reason, ev.evType, ev.regarding, ev.regarding)
	}
	for _, w := range []string{art, "hub", del.Name, why} {
		if !strings.Contains(ev.note, w) {
			t.Fatalf("the %s event says %q, want it to say %q", ev.reason, ev.note, w)
		}
	}
	var said bool
	for _, l := range logged {
		said = said || (strings.Contains(l, art) && strings.Contains(l, why))
	}
	if !said {
		t.Fatalf("the agent's log: %q, want a line naming %s and the task's message", logged, art)
	}
}

// TestADeletedBackupDeletesThePartialArtefactOfAPartThatFailedAfterItStarted
// pins which failed parts a backup's deletion deletes the artefact of.
// It ran the deleteBackup hook for the parts that succeeded only, so a
// job that failed after writing (a truncated file, the first objects of a
// dump) left data that retention never removed, even once it had deleted
// the failed backup: a full volume stayed full. A part whose task started
// is deleted as one that succeeded; one that failed before its task
// started wrote nothing, and runs no hook.
func TestADeletedBackupDeletesThePartialArtefactOfAPartThatFailedAfterItStarted(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	opts.Drivers = deletingDriver{}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	failed := func(name string, started *metav1.Time, why string) *v1alpha1.StyrminBackup {
		t.Helper()
		b, _ := newBackup(ctx, t, cl, name, v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationFailed, Location: "s3://backups/local/data", Message: "failed for hub: " + why,
			Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: task.OperationTaskName("hub", v1alpha1.OperationBackup, name, 1),
				Phase: v1alpha1.OperationFailed, Message: why, StartedAt: started, FinishedAt: started,
				Artifact: "s3://backups/local/data/" + name + "/hub", Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}})
		if err := cl.Delete(ctx, b); err != nil {
			t.Fatal(err)
		}
		return b
	}

	// Nightly's dump failed half-way: its partial artefact is deleted.
	now := metav1.Now()
	nightly := failed("nightly", &now, "step backup/core/1:runJob (StepFailed) failed: pg_dump: error: connection lost")
	deletionWaits(ctx, t, cl, backups, nightly, v1alpha1.ReasonDeletingArtifacts, "deleting the artefacts of hub")
	del := deleteBackupTask(ctx, t, cl, "nightly")
	if del == nil || del.Spec.Operation.Artifact != "s3://backups/local/data/nightly/hub" {
		t.Fatalf("hub's deleteBackup task for nightly: %+v, want one deleting s3://backups/local/data/nightly/hub", del)
	}
	del.Status.Phase = v1alpha1.TaskSucceeded
	if err := cl.Status().Update(ctx, del); err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, backups, nightly) {
		t.Fatalf("backup nightly stays once its partial artefact is deleted: %+v", nightly.Status.Conditions)
	}

	// Weekly's part was refused before its task started: it goes at once.
	weekly := failed("weekly", nil, "refused: deployment hub does not run here")
	if reconcileAndRead(ctx, t, cl, backups, weekly) {
		t.Fatalf("backup weekly, whose part never started, stays at its deletion: %+v", weekly.Status.Conditions)
	}
	if d := deleteBackupTask(ctx, t, cl, "weekly"); d != nil {
		t.Fatalf("a deleteBackup task %s for weekly, whose part never started", d.Name)
	}
}
