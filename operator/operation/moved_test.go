package operation_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// restoringFromAPVC is restoring with local/data's backups on
// pvc://backups/data (claim backups in data-hub), backup tuesday of hub
// there, and restore failed, whose first attempt failed in data-hub (its
// task is there). It returns the options with those settings.
func restoringFromAPVC(t *testing.T) (context.Context, client.Client, operation.Options, *v1alpha1.StyrminRestore) {
	t.Helper()
	ctx, cl, _, opts := restoring(t)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		return []resolver.EnvironmentBackups{{Cluster: "local", Environment: "data", Location: "pvc://backups/data"}}, nil
	})
	newClaim(ctx, t, cl, "data-hub", "backups")
	artifact := "pvc://backups/data/tuesday/hub"
	newBackup(ctx, t, cl, "tuesday", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "pvc://backups/data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-backup-tuesday-1", Phase: v1alpha1.OperationSucceeded,
			Artifact: artifact, Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}})
	first := attemptTask("failed", 1)
	failed := newRestore(ctx, t, cl, "failed", "tuesday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationFailed, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: first, Attempt: 1, Phase: v1alpha1.OperationFailed,
			Artifact: artifact, Sequence: 3}}})
	op := v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: failed.Name, BackupID: "tuesday", Artifact: artifact, Attempt: 1}
	newOperationTask(ctx, t, cl, first, op, 3, 3, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskFailed, Message: "the restore failed"})
	return ctx, cl, opts, failed
}

// attemptTask is the name of hub's task of attempt of restore name.
func attemptTask(name string, attempt int32) string {
	return task.OperationTaskName("hub", v1alpha1.OperationRestore, name, attempt)
}

// wantTasks fails the test unless restore rs's tasks are want
// ("namespace/name", any order), in whatever namespace.
func wantTasks(ctx context.Context, t *testing.T, cl client.Client, rs *v1alpha1.StyrminRestore, what string, want ...string) {
	t.Helper()
	var list v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelOperation: rs.Name}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range list.Items {
		got = append(got, tk.Namespace+"/"+tk.Name)
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("%s: restore %s's tasks %v, want %v", what, rs.Name, got, want)
	}
}

// wantHub fails the test unless restore rs's phase is phase, with hub's
// attempt attempt recorded in namespace.
func wantHub(t *testing.T, rs *v1alpha1.StyrminRestore, what string, phase v1alpha1.OperationPhase, attempt int32, namespace string) {
	t.Helper()
	d := rs.Status.Deployments[0]
	if rs.Status.Phase != phase || d.Attempt != attempt || d.Namespace != namespace || d.Task != attemptTask(rs.Name, attempt) {
		t.Fatalf("%s: %s %q, hub's attempt %d (task %s/%s, %s %q); want %s, attempt %d recorded in %s",
			what, rs.Status.Phase, rs.Status.Message, d.Attempt, d.Namespace, d.Task, d.Phase, d.Message, phase, attempt, namespace)
	}
}

// TestARestoreRetriedAfterItsDeploymentMovedNamespaceEndsWithItsTask pins
// where a retry records its deployment's namespace: where its task is
// made, the namespace the deployment runs in now. Hub removed and added
// back under another namespacePrefix after its restore failed got its
// retry's task in new-ns, while the restore looked for it in data-hub,
// the namespace its first attempt ran in: the restore stayed Running with
// hub Pending for ever, whatever the task did. Its next attempt takes the
// failed one's place in new-ns, and its deletion deletes its tasks in
// both namespaces.
func TestARestoreRetriedAfterItsDeploymentMovedNamespaceEndsWithItsTask(t *testing.T) {
	t.Parallel()
	ctx, cl, opts, failed := restoringFromAPVC(t)
	r, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	moveHub(ctx, t, cl, "data-hub", "new-ns")
	newClaim(ctx, t, cl, "new-ns", "backups")
	first, second, third := attemptTask(failed.Name, 1), attemptTask(failed.Name, 2), attemptTask(failed.Name, 3)

	retryRestore(ctx, t, cl, r, failed, "1")
	wantHub(t, failed, "the retry", v1alpha1.OperationRunning, 2, "new-ns")
	wantTasks(ctx, t, cl, failed, "the retry", "data-hub/"+first, "new-ns/"+second)
	endTaskIn(ctx, t, cl, "new-ns", second, v1alpha1.TaskFailed)
	reconcileAndRead(ctx, t, cl, r, failed)
	wantHub(t, failed, "the retry's task failed in new-ns", v1alpha1.OperationFailed, 2, "new-ns")

	// Hub's change 4 in new-ns waits behind that failure: the next
	// attempt goes in the failed one's place, before it.
	newHubChange4In(ctx, t, cl, "new-ns")
	retryRestore(ctx, t, cl, r, failed, "2")
	wantHub(t, failed, "the second retry", v1alpha1.OperationRunning, 3, "new-ns")
	wantTasks(ctx, t, cl, failed, "the second retry", "data-hub/"+first, "new-ns/"+second, "new-ns/"+third)
	var retry v1alpha1.StyrminTask
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "new-ns", Name: third}, &retry); err != nil {
		t.Fatal(err)
	}
	if retry.Spec.ToSequence != 3 {
		t.Errorf("the third attempt goes at sequence %d, want 3, the second attempt's place in new-ns before change 4", retry.Spec.ToSequence)
	}
	endTaskIn(ctx, t, cl, "new-ns", third, v1alpha1.TaskSucceeded)
	reconcileAndRead(ctx, t, cl, r, failed)
	wantHub(t, failed, "the second retry's task succeeded in new-ns", v1alpha1.OperationSucceeded, 3, "new-ns")

	if err := cl.Delete(ctx, failed); err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, r, failed) {
		t.Fatalf("the deleted restore is still there: finalizers %v", failed.Finalizers)
	}
	wantTasks(ctx, t, cl, failed, "after the restore's deletion")
}

// stopsBeforeTasks is the client of an agent stopped between an
// operation's status write and the making of its tasks: each create of a
// StyrminTask fails.
type stopsBeforeTasks struct{ client.Client }

func (c stopsBeforeTasks) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*v1alpha1.StyrminTask); ok {
		return errors.New("the agent stopped")
	}
	return c.Client.Create(ctx, obj, opts...)
}

// retryStopped asks restore rs to run again through an agent that stops
// before it makes the retry's tasks, and reads rs back.
func retryStopped(ctx context.Context, t *testing.T, cl client.Client, opts operation.Options, rs *v1alpha1.StyrminRestore, retry string) {
	t.Helper()
	opts.Client = stopsBeforeTasks{cl}
	r, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	rs.Spec.Retry = retry
	if err := cl.Update(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rs)}); err == nil {
		t.Fatal("the retry of an agent that stops before its tasks: no error")
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(rs), rs); err != nil {
		t.Fatal(err)
	}
}

// TestARestoreRetryResumedAfterTheAgentStoppedMakesItsTaskOnceWhereRecorded
// pins the retry of a moved deployment across an agent stopped between
// the retry's status write and its task: the write records the new
// namespace, and the next agent makes the task there, once, and records
// its end.
func TestARestoreRetryResumedAfterTheAgentStoppedMakesItsTaskOnceWhereRecorded(t *testing.T) {
	t.Parallel()
	ctx, cl, opts, failed := restoringFromAPVC(t)
	moveHub(ctx, t, cl, "data-hub", "new-ns")
	newClaim(ctx, t, cl, "new-ns", "backups")
	first, second := attemptTask(failed.Name, 1), attemptTask(failed.Name, 2)

	retryStopped(ctx, t, cl, opts, failed, "1")
	wantHub(t, failed, "the retry stopped before its task", v1alpha1.OperationRunning, 2, "new-ns")
	wantTasks(ctx, t, cl, failed, "the retry stopped before its task", "data-hub/"+first)

	r, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		reconcileAndRead(ctx, t, cl, r, failed)
	}
	wantTasks(ctx, t, cl, failed, "the retry resumed", "data-hub/"+first, "new-ns/"+second)
	endTaskIn(ctx, t, cl, "new-ns", second, v1alpha1.TaskSucceeded)
	reconcileAndRead(ctx, t, cl, r, failed)
	wantHub(t, failed, "the resumed retry's task succeeded", v1alpha1.OperationSucceeded, 2, "new-ns")
}

// TestARestoreRetryWhoseDeploymentMovedAgainBeforeItsTaskEndsFailed: a
// deployment moved again between a retry's status write and its task
// (the agent stopped in between) would get its task where the restore
// does not look for it; and the claim was checked in the namespace it
// left. That attempt ends Failed, naming both namespaces, with no task
// made; the next retry runs it where the deployment is.
func TestARestoreRetryWhoseDeploymentMovedAgainBeforeItsTaskEndsFailed(t *testing.T) {
	t.Parallel()
	ctx, cl, opts, failed := restoringFromAPVC(t)
	moveHub(ctx, t, cl, "data-hub", "new-ns")
	newClaim(ctx, t, cl, "new-ns", "backups")
	retryStopped(ctx, t, cl, opts, failed, "1")
	moveHub(ctx, t, cl, "new-ns", "third-ns")
	newClaim(ctx, t, cl, "third-ns", "backups")

	r, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, failed)
	wantHub(t, failed, "the retry resumed after hub moved again", v1alpha1.OperationFailed, 2, "new-ns")
	if msg := failed.Status.Deployments[0].Message; !strings.Contains(msg, "new-ns") || !strings.Contains(msg, "third-ns") || !strings.Contains(msg, "retry") {
		t.Errorf("hub's message: %q, want it to name new-ns, third-ns and the retry", msg)
	}
	wantTasks(ctx, t, cl, failed, "the retry resumed after hub moved again", "data-hub/"+attemptTask(failed.Name, 1))

	retryRestore(ctx, t, cl, r, failed, "2")
	wantHub(t, failed, "the next retry", v1alpha1.OperationRunning, 3, "third-ns")
	wantTasks(ctx, t, cl, failed, "the next retry", "data-hub/"+attemptTask(failed.Name, 1), "third-ns/"+attemptTask(failed.Name, 3))
}
