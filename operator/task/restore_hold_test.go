package task

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/crdtest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
)

// withCRDs starts a control plane serving the styrmin.io CRDs, with
// namespace ns.
func withCRDs(t *testing.T, ns string) client.Client {
	t.Helper()
	return crdtest.Start(t, ns)
}

// noDrivers gives no driver: the tasks here are planned already.
type noDrivers struct{}

func (noDrivers) Driver(context.Context, driversource.Request) (*drivers.Driver, error) {
	return nil, errors.New("no driver: the tasks here are planned already")
}

// TestABackupWaitsWhileARestoreOfItsDeploymentFailedAndTheRetryGoesFirst
// pins what a failed restore holds: the deployment's data is half
// restored, and only its changes waited. The nightly backup's task ran,
// and its backup recorded the half-restored data as Succeeded, which
// `env clone --from-backup latest` then chose and retention counted
// toward keep. The backup waits instead, naming the restore; the retry,
// made after the backup and so ordered after it, runs first (each waiting
// for the other would hold both for ever), and the backup runs once the
// retry succeeded.
func TestABackupWaitsWhileARestoreOfItsDeploymentFailedAndTheRetryGoesFirst(t *testing.T) {
	t.Parallel()
	cl, r := holdReconciler(t)
	ctx := context.Background()
	task := func(kind v1alpha1.OperationKind, name string, attempt int32, status v1alpha1.StyrminTaskStatus) *v1alpha1.StyrminTask {
		t.Helper()
		return hubOperationTask(ctx, t, cl, kind, name, attempt, status)
	}
	planned := plannedAt3
	// awaitTurn runs the task's turn from what the API server holds: true
	// when it may run its steps.
	awaitTurn := func(tk *v1alpha1.StyrminTask) (bool, *v1alpha1.StyrminTask) {
		t.Helper()
		return turnOf(ctx, t, cl, r, tk)
	}
	heldBy := func(tk *v1alpha1.StyrminTask, want string) {
		t.Helper()
		runs, fresh := awaitTurn(tk)
		c := apimeta.FindStatusCondition(fresh.Status.Conditions, v1alpha1.ConditionReady)
		if runs || c == nil || c.Reason != v1alpha1.ReasonRestoreInProgress || !strings.Contains(c.Message, want) || !strings.Contains(c.Message, "this backup waits") {
			t.Fatalf("the backup's task: runs %t, Ready %+v; want it waiting, %s, naming %q", runs, c, v1alpha1.ReasonRestoreInProgress, want)
		}
	}

	// Restore r1's first attempt failed partway; the nightly backup was
	// made after it.
	failed := planned(v1alpha1.WorkflowRestore)
	failed.Phase, failed.Message = v1alpha1.TaskFailed, "step restore/core/1:runJob failed: job restore-db failed\nlogs"
	failed.Steps[0].State, failed.Steps[0].StartedAt, failed.Steps[0].Attempts = v1alpha1.StepFailed, &metav1.Time{Time: time.Now()}, 1
	task(v1alpha1.OperationRestore, "r1", 1, failed)
	backup := task(v1alpha1.OperationBackup, "nightly", 1, planned(v1alpha1.WorkflowBackup))
	heldBy(backup, "StyrminRestore r1 failed (step restore/core/1:runJob failed: job restore-db failed)")

	// Retried: the retry, made after the backup, goes first.
	retry := task(v1alpha1.OperationRestore, "r1", 2, planned(v1alpha1.WorkflowRestore))
	if runs, _ := awaitTurn(retry); !runs {
		t.Fatal("the retry of restore r1 waits for the backup its failure holds: both wait for ever")
	}
	heldBy(backup, "StyrminRestore r1 is being retried")

	retry.Status.Phase = v1alpha1.TaskSucceeded
	if err := cl.Status().Update(ctx, retry); err != nil {
		t.Fatal(err)
	}
	if runs, fresh := awaitTurn(backup); !runs {
		t.Fatalf("the backup's task after restore r1's retry succeeded: waits (%+v), want it to run", fresh.Status.Conditions)
	}
}

// TestABackupsDeletionDoesNotWaitForAChangeAFailedRestoreHolds pins the
// deleteBackup task made while a restore of its deployment had failed: it
// is ordered after the deployment's newest change, which the failed
// restore holds, and it waited for that change, so for the restore: the
// backup's deletion hung, its finalizer kept, until someone retried or
// deleted the restore, though a deletion reads nothing of the
// deployment's data and is held by no restore itself. It runs beside the
// held change; a change that runs is still waited for.
func TestABackupsDeletionDoesNotWaitForAChangeAFailedRestoreHolds(t *testing.T) {
	t.Parallel()
	cl, r := holdReconciler(t)
	ctx := context.Background()
	hub := v1alpha1.DeploymentID{Cluster: "local", Environment: "data", Name: "hub"}
	lock := v1alpha1.LockRef{Commit: "unknown", Path: "locks/local/data/hub.lock.yaml"}
	planned := func(wf v1alpha1.Workflow) v1alpha1.StyrminTaskStatus {
		return v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskPending, Workflow: wf, FromSequence: 3,
			Steps: []v1alpha1.TaskStep{{Name: string(wf) + "/core/1:runJob", Hook: string(wf), Mode: "core", Action: string(drivers.ActionRunJob), State: v1alpha1.StepPending}}}
	}
	create := func(tk *v1alpha1.StyrminTask, status v1alpha1.StyrminTaskStatus) *v1alpha1.StyrminTask {
		t.Helper()
		if err := cl.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		tk.Status = status
		if err := cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	operation := func(kind v1alpha1.OperationKind, name string, to int64, status v1alpha1.StyrminTaskStatus) *v1alpha1.StyrminTask {
		t.Helper()
		labels := hub.Labels()
		labels[v1alpha1.LabelOperation] = name
		return create(&v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: "data-hub", Name: OperationTaskName("hub", kind, name, 1), Labels: labels},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: hub, Namespace: "data-hub", Workflow: OperationWorkflow(kind), FromSequence: 3, ToSequence: to, Lock: lock,
				Operation: &v1alpha1.TaskOperation{Kind: kind, Name: name, BackupID: "monday", Artifact: "s3://backups/local/data/monday/hub", Attempt: 1}},
		}, status)
	}
	awaitTurn := func(tk *v1alpha1.StyrminTask) (bool, *v1alpha1.StyrminTask) {
		t.Helper()
		return turnOf(ctx, t, cl, r, tk)
	}

	// Restore r1 of hub failed partway; a change to sequence 4 waits
	// behind it; then backup monday is deleted: its deleteBackup task goes
	// after the change (orderAfter).
	failed := planned(v1alpha1.WorkflowRestore)
	failed.Phase, failed.Message = v1alpha1.TaskFailed, "step restore/core/1:runJob failed: job restore-db failed"
	failed.Steps[0].State, failed.Steps[0].StartedAt, failed.Steps[0].Attempts = v1alpha1.StepFailed, &metav1.Time{Time: time.Now()}, 1
	operation(v1alpha1.OperationRestore, "r1", 3, failed)
	change := create(&v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: "data-hub", Name: v1alpha1.TaskName("hub", 4), Labels: hub.Labels()},
		Spec:       v1alpha1.StyrminTaskSpec{Deployment: hub, Namespace: "data-hub", Workflow: v1alpha1.WorkflowUpdate, FromSequence: 3, ToSequence: 4, Lock: lock},
	}, planned(v1alpha1.WorkflowUpdate))
	deletion := operation(v1alpha1.OperationDeleteBackup, "monday", 4, planned(v1alpha1.WorkflowDeleteBackup))

	runs, change := awaitTurn(change)
	if c := apimeta.FindStatusCondition(change.Status.Conditions, v1alpha1.ConditionReady); runs || c == nil || !strings.Contains(c.Message, "StyrminRestore r1 failed") {
		t.Fatalf("hub's change to sequence 4 behind failed restore r1: runs %t (%+v), want it held", runs, change.Status.Conditions)
	}
	if runs, fresh := awaitTurn(deletion); !runs {
		t.Fatalf("monday's deleteBackup task behind the change r1 holds: waits (%+v), want it to run", fresh.Status.Conditions)
	}

	// Once the change runs (r1 deleted, say), the deletion waits for it.
	change.Status.Phase = v1alpha1.TaskRunning
	if err := cl.Status().Update(ctx, change); err != nil {
		t.Fatal(err)
	}
	if runs, _ := awaitTurn(deletion); runs {
		t.Fatal("monday's deleteBackup task runs beside hub's change that runs")
	}
}

// turnOf runs tk's turn (awaitTurn) from what the API server holds: true
// when it may run its steps, with tk as it is after.
func turnOf(ctx context.Context, t *testing.T, cl client.Client, r *Reconciler, tk *v1alpha1.StyrminTask) (bool, *v1alpha1.StyrminTask) {
	t.Helper()
	var fresh v1alpha1.StyrminTask
	if err := cl.Get(ctx, client.ObjectKeyFromObject(tk), &fresh); err != nil {
		t.Fatal(err)
	}
	res, err := r.awaitTurn(ctx, &taskRun{task: &fresh, log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(tk), &fresh); err != nil {
		t.Fatal(err)
	}
	return !res.stop, &fresh
}

// holdReconciler is a control plane with namespace data-hub and a task
// reconciler over it whose tasks are planned already (no driver).
func holdReconciler(t *testing.T) (client.Client, *Reconciler) {
	t.Helper()
	cl := withCRDs(t, "data-hub")
	r, err := NewReconciler(Options{Client: cl, Drivers: noDrivers{}, AgentNamespace: "styrmin-system", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return cl, r
}

// hubOperationTask makes hub's task of an operation at sequence 3 in
// namespace data-hub, in a second of its own (operations at one sequence
// run in the order made), with status.
func hubOperationTask(ctx context.Context, t *testing.T, cl client.Client, kind v1alpha1.OperationKind, name string, attempt int32, status v1alpha1.StyrminTaskStatus) *v1alpha1.StyrminTask {
	t.Helper()
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	hub := v1alpha1.DeploymentID{Cluster: "local", Environment: "data", Name: "hub"}
	labels := hub.Labels()
	labels[v1alpha1.LabelOperation] = name
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: "data-hub", Name: OperationTaskName("hub", kind, name, attempt), Labels: labels},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: hub, Namespace: "data-hub", Workflow: OperationWorkflow(kind), FromSequence: 3, ToSequence: 3,
			Lock:      v1alpha1.LockRef{Commit: "unknown", Path: "locks/local/data/hub.lock.yaml"},
			Operation: &v1alpha1.TaskOperation{Kind: kind, Name: name, BackupID: "monday", Artifact: "s3://backups/local/data/monday/hub", Attempt: attempt}},
	}
	if err := cl.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	tk.Status = status
	if err := cl.Status().Update(ctx, tk); err != nil {
		t.Fatal(err)
	}
	return tk
}

// plannedAt3 is the status of a task of workflow wf planned at sequence
// 3, its one runJob step pending.
func plannedAt3(wf v1alpha1.Workflow) v1alpha1.StyrminTaskStatus {
	return v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskPending, Workflow: wf, FromSequence: 3,
		Steps: []v1alpha1.TaskStep{{Name: string(wf) + "/core/1:runJob", Hook: string(wf), Mode: "core", Action: string(drivers.ActionRunJob), State: v1alpha1.StepPending}}}
}

// TestATaskHeldByARestoreWhoseFailureIsLongWritesItsWaitOnce pins the
// bound on a held task's wait. Its message names the failed restore's
// first line, which a task's message bound lets reach 8 KiB; with the
// words around it the wait's message was over the bound the condition
// holds. Compared with the whole message the condition always differed,
// and each look (every 30 s, for as long as the restore stays failed:
// days) wrote the task's status again.
func TestATaskHeldByARestoreWhoseFailureIsLongWritesItsWaitOnce(t *testing.T) {
	t.Parallel()
	direct := withCRDs(t, "data-hub")
	var writes atomic.Int32
	count := func(obj client.Object) {
		if _, ok := obj.(*v1alpha1.StyrminTask); ok {
			writes.Add(1)
		}
	}
	cl := interceptor.NewClient(noWatch{direct}, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			count(obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			count(obj)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	r, err := NewReconciler(Options{Client: cl, Drivers: noDrivers{}, AgentNamespace: "styrmin-system", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	failed := plannedAt3(v1alpha1.WorkflowRestore)
	failed.Phase, failed.Message = v1alpha1.TaskFailed, "step restore/core/1:runJob failed: "+strings.Repeat("workload not ready; ", maxMessage/20)
	failed.Steps[0].State, failed.Steps[0].StartedAt, failed.Steps[0].Attempts = v1alpha1.StepFailed, &metav1.Time{Time: time.Now()}, 1
	hubOperationTask(ctx, t, cl, v1alpha1.OperationRestore, "r1", 1, failed)
	backup := hubOperationTask(ctx, t, cl, v1alpha1.OperationBackup, "nightly", 1, plannedAt3(v1alpha1.WorkflowBackup))

	runs, first := turnOf(ctx, t, cl, r, backup)
	c := apimeta.FindStatusCondition(first.Status.Conditions, v1alpha1.ConditionReady)
	if runs || c == nil || c.Reason != v1alpha1.ReasonRestoreInProgress || len(c.Message) > maxMessage {
		t.Fatalf("the backup's task: runs %t, Ready %+v; want it waiting, %s, its message at most %d bytes", runs, c, v1alpha1.ReasonRestoreInProgress, maxMessage)
	}
	// The API server leaves the task as it was when given the same
	// status: what is counted is the requests.
	before := writes.Load()
	for range 2 {
		turnOf(ctx, t, cl, r, backup)
	}
	if n := writes.Load() - before; n != 0 {
		t.Fatalf("two later looks wrote the unchanged wait %d times: a look should write only a change", n)
	}
}
