package operation_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/internal/cachetest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/operator/task"
)

// TestARestoreRecordedEndedIsNotRunAgainFromACacheBehindItsRecord pins
// the read before a missing task is made again. The restore recorded hub
// Succeeded; hub's task was deleted since (by hand); the cache still held
// the copy from before that record (hub Pending, not started), and the
// task was made again from it: the restore ran a second time over the
// data written since. Read again from the API server, it is ended and
// nothing is made.
func TestARestoreRecordedEndedIsNotRunAgainFromACacheBehindItsRecord(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	name := task.OperationTaskName("hub", v1alpha1.OperationRestore, "back-to-monday", 1)
	started := metav1.Now()
	pending := v1alpha1.OperationDeployment{Name: "hub", Namespace: "data-hub", Task: name, Phase: v1alpha1.OperationPending,
		Artifact: "s3://backups/local/data/monday/hub", Sequence: 3, Attempt: 1, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}
	rs := newRestore(ctx, t, cl, "back-to-monday", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationRunning, Environment: "data",
		StartedAt: &started, Deployments: []v1alpha1.OperationDeployment{pending}})
	before := rs.DeepCopy()
	ended := pending
	ended.Phase, ended.StartedAt, ended.FinishedAt = v1alpha1.OperationSucceeded, &started, &started
	writeStatus(ctx, t, cl, rs, func(rs *v1alpha1.StyrminRestore) {
		rs.Status.Phase, rs.Status.FinishedAt, rs.Status.Deployments = v1alpha1.OperationSucceeded, &started, []v1alpha1.OperationDeployment{ended}
	})

	opts.Client = cachetest.Stale{Client: cl, Copy: before}
	r, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, rs)
	noTasks(ctx, t, cl, "a restore recorded Succeeded, reconciled from a cache behind that record")
	if d := rs.Status.Deployments; rs.Status.Phase != v1alpha1.OperationSucceeded || len(d) != 1 || d[0].Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("the restore after a reconcile from a cache behind its record: %s, deployments %+v; want the record kept", rs.Status.Phase, d)
	}
}

// TestABackupRecordedEndedIsNotTakenAgainFromACacheBehindItsRecord pins
// the same read of a backup: hub's part recorded Succeeded, its task
// deleted since, and a cache from before the record made the task again,
// writing hub's artefact again after the backup's record of it (a
// deletion of the backup meanwhile left that artefact behind).
func TestABackupRecordedEndedIsNotTakenAgainFromACacheBehindItsRecord(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	name := task.OperationTaskName("hub", v1alpha1.OperationBackup, "nightly", 1)
	started := metav1.Now()
	pending := v1alpha1.OperationDeployment{Name: "hub", Namespace: "data-hub", Task: name, Phase: v1alpha1.OperationPending,
		Artifact: "s3://backups/local/data/nightly/hub", Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}
	b, _ := newBackup(ctx, t, cl, "nightly", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationRunning, Location: "s3://backups/local/data",
		StartedAt: &started, Deployments: []v1alpha1.OperationDeployment{pending}})
	before := b.DeepCopy()
	ended := pending
	ended.Phase, ended.Size, ended.StartedAt, ended.FinishedAt = v1alpha1.OperationSucceeded, 1234, &started, &started
	writeStatus(ctx, t, cl, b, func(b *v1alpha1.StyrminBackup) {
		b.Status.Phase, b.Status.FinishedAt, b.Status.Deployments = v1alpha1.OperationSucceeded, &started, []v1alpha1.OperationDeployment{ended}
	})

	opts.Client = cachetest.Stale{Client: cl, Copy: before}
	r, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, b)
	noTasks(ctx, t, cl, "a backup recorded Succeeded, reconciled from a cache behind that record")
	if d := b.Status.Deployments; b.Status.Phase != v1alpha1.OperationSucceeded || len(d) != 1 || d[0].Phase != v1alpha1.OperationSucceeded || d[0].Size != 1234 {
		t.Fatalf("the backup after a reconcile from a cache behind its record: %s, deployments %+v; want the record kept", b.Status.Phase, d)
	}
}
