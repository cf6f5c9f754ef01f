package operation_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/operator/task"
)

// overtaken is a client whose next status write is overtaken: race, when
// set, runs once before it is sent (the next leader's write, landing
// while this one was paused past its lease between its read and its
// write).
type overtaken struct {
	client.Client
	mu   sync.Mutex
	race func()
}

// arm sets race for the next status write.
func (c *overtaken) arm(race func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.race = race
}

func (c *overtaken) runRace() {
	c.mu.Lock()
	race := c.race
	c.race = nil
	c.mu.Unlock()
	if race != nil {
		race()
	}
}

func (c *overtaken) Status() client.SubResourceWriter {
	return &overtakenWriter{SubResourceWriter: c.Client.Status(), c: c}
}

type overtakenWriter struct {
	client.SubResourceWriter
	c *overtaken
}

func (w *overtakenWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	w.c.runRace()
	return w.SubResourceWriter.Update(ctx, obj, opts...)
}

func (w *overtakenWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	w.c.runRace()
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// writeStatus writes obj's status as set sets it, on the copy the API
// server holds.
func writeStatus[T client.Object](ctx context.Context, t *testing.T, cl client.Client, obj T, set func(T)) {
	t.Helper()
	if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Error(err)
		return
	}
	set(obj)
	if err := cl.Status().Update(ctx, obj); err != nil {
		t.Error(err)
	}
}

// noTasks fails t when any StyrminTask is in namespace data-hub.
func noTasks(ctx context.Context, t *testing.T, cl client.Client, what string) {
	t.Helper()
	var tasks v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &tasks, client.InNamespace("data-hub")); err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks.Items {
		t.Errorf("%s: task %s was made", what, tk.Name)
	}
}

// TestABackupsStartDoesNotWriteOverTheRecordOfTheNextLeader pins the
// start's status write on the copy it decided on. A leader paused inside
// the start's checks (past its lease) while the next leader started the
// backup, saw it end and recorded it Succeeded, then moved the location,
// woke and wrote Running, hub Pending, its own location and artefact URL
// over that record: once hub's task was recorded again, the backup named
// artefacts no task wrote, and a restore read those.
func TestABackupsStartDoesNotWriteOverTheRecordOfTheNextLeader(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	b, _ := newBackup(ctx, t, cl, "nightly", v1alpha1.StyrminBackupStatus{})
	finished := metav1.Now()
	recorded := v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "s3://moved/local/data", StartedAt: &finished, FinishedAt: &finished,
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: task.OperationTaskName("hub", v1alpha1.OperationBackup, "nightly", 1), Phase: v1alpha1.OperationSucceeded,
			Artifact: "s3://moved/local/data/nightly/hub", Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}}
	opts.Client = &overtaken{Client: cl, race: func() {
		writeStatus(ctx, t, cl, &v1alpha1.StyrminBackup{ObjectMeta: b.ObjectMeta}, func(b *v1alpha1.StyrminBackup) { b.Status = recorded })
	}}
	r, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, b)
	if d := b.Status.Deployments; b.Status.Phase != v1alpha1.OperationSucceeded || b.Status.Location != recorded.Location || len(d) != 1 ||
		d[0].Phase != v1alpha1.OperationSucceeded || d[0].Artifact != recorded.Deployments[0].Artifact {
		t.Fatalf("the backup after a start overtaken by the next leader's record: %s at %s, deployments %+v; want the record kept (%s at %s, %+v)",
			b.Status.Phase, b.Status.Location, d, recorded.Phase, recorded.Location, recorded.Deployments)
	}
	noTasks(ctx, t, cl, "a start overtaken by a backup recorded Succeeded")
}

// TestARestoresStartDoesNotWriteOverTheRecordOfTheNextLeader pins the
// same write of a restore: a leader paused inside its checks while the
// next leader restored hub and recorded it Succeeded woke and wrote
// Running, hub Pending, over it, holding hub's changes behind a restore
// that had ended; with hub's task deleted by hand since, it made the task
// again, and the restore ran a second time over the data written since.
func TestARestoresStartDoesNotWriteOverTheRecordOfTheNextLeader(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	rs := newRestore(ctx, t, cl, "back-to-monday", "monday", v1alpha1.StyrminRestoreStatus{})
	finished := metav1.Now()
	recorded := v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationSucceeded, Environment: "data", StartedAt: &finished, FinishedAt: &finished,
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: task.OperationTaskName("hub", v1alpha1.OperationRestore, "back-to-monday", 1), Phase: v1alpha1.OperationSucceeded,
			Artifact: "s3://backups/local/data/monday/hub", Sequence: 3, Attempt: 1, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}}
	opts.Client = &overtaken{Client: cl, race: func() {
		writeStatus(ctx, t, cl, &v1alpha1.StyrminRestore{ObjectMeta: rs.ObjectMeta}, func(rs *v1alpha1.StyrminRestore) { rs.Status = recorded })
	}}
	r, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, rs)
	if d := rs.Status.Deployments; rs.Status.Phase != v1alpha1.OperationSucceeded || len(d) != 1 || d[0].Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("the restore after a start overtaken by the next leader's record: %s, deployments %+v; want the record kept", rs.Status.Phase, d)
	}
	noTasks(ctx, t, cl, "a start overtaken by a restore recorded Succeeded")
}

// specOvertaken is a client whose first patch of an object (not of its
// status) is overtaken: race runs once before it is sent.
type specOvertaken struct {
	client.Client
	once sync.Once
	race func()
}

func (c *specOvertaken) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.once.Do(c.race)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// TestARetryAskedOfAFailedRestoreThatAnotherRetryStartedMeanwhileIsRefused
// pins the retry's write on the copy read failed. Two retries of one
// failed restore (two engineers, a CI job run twice): the other's was
// taken by the agent between this one's read and its write, and this one
// landed on the running retry, so that when it failed too it was retried
// again at once, its restore hooks run a third time with no one having
// seen why the second failed. It is read again and refused: it runs.
func TestARetryAskedOfAFailedRestoreThatAnotherRetryStartedMeanwhileIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cl, _, _ := restoring(t)
	finished := metav1.Now()
	rs := newRestore(ctx, t, cl, "back-to-monday", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationFailed, Environment: "data",
		FinishedAt: &finished, Message: "hub: the restore failed",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: task.OperationTaskName("hub", v1alpha1.OperationRestore, "back-to-monday", 1),
			Phase: v1alpha1.OperationFailed, Artifact: "s3://backups/local/data/monday/hub", Sequence: 3, Attempt: 1}}})
	racing := &specOvertaken{Client: cl, race: func() {
		// The other retry, and the agent starting it.
		var other v1alpha1.StyrminRestore
		if err := cl.Get(ctx, client.ObjectKeyFromObject(rs), &other); err != nil {
			t.Error(err)
			return
		}
		other.Spec.Retry = "theirs"
		if err := cl.Update(ctx, &other); err != nil {
			t.Error(err)
			return
		}
		writeStatus(ctx, t, cl, &other, func(rs *v1alpha1.StyrminRestore) {
			rs.Status.Phase, rs.Status.ObservedRetry, rs.Status.FinishedAt = v1alpha1.OperationRunning, "theirs", nil
			rs.Status.Deployments[0].Attempt, rs.Status.Deployments[0].Phase = 2, v1alpha1.OperationPending
		})
	}}
	err := operation.RetryRestore(ctx, racing, client.ObjectKeyFromObject(rs), time.Now())
	if err == nil || !strings.Contains(err.Error(), "is Running: only a failed restore is retried") {
		t.Fatalf("a retry whose restore another retry started meanwhile: %v, want it refused as running", err)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(rs), rs); err != nil {
		t.Fatal(err)
	}
	if rs.Spec.Retry != "theirs" {
		t.Fatalf("spec.retry %q after a retry refused, want the other's %q", rs.Spec.Retry, "theirs")
	}
}

// TestABackupsProgressReadBeforeTheNextLeaderRecordedItsEndIsNotWrittenOverIt
// pins record's write on the copy it read: progress read while hub's
// task ran (hub Running), written after the next leader recorded the
// task's end, put hub back Running under a backup Succeeded, its end and
// size gone from the record.
func TestABackupsProgressReadBeforeTheNextLeaderRecordedItsEndIsNotWrittenOverIt(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	name := task.OperationTaskName("hub", v1alpha1.OperationBackup, "nightly", 1)
	started := metav1.Now()
	running := v1alpha1.OperationDeployment{Name: "hub", Namespace: "data-hub", Task: name, Phase: v1alpha1.OperationPending,
		Artifact: "s3://backups/local/data/nightly/hub", Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}
	b, _ := newBackup(ctx, t, cl, "nightly", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationRunning, Location: "s3://backups/local/data", StartedAt: &started,
		Deployments: []v1alpha1.OperationDeployment{running}})
	newOperationTask(ctx, t, cl, name, v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: b.Name, BackupID: b.Name, Artifact: running.Artifact, Attempt: 1}, 3, 3,
		v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, Workflow: v1alpha1.WorkflowBackup, FromSequence: 3, StartedAt: &started})
	ended := running
	ended.Phase, ended.Size, ended.StartedAt, ended.FinishedAt = v1alpha1.OperationSucceeded, 1234, &started, &started
	opts.Client = &overtaken{Client: cl, race: func() {
		writeStatus(ctx, t, cl, &v1alpha1.StyrminBackup{ObjectMeta: b.ObjectMeta}, func(b *v1alpha1.StyrminBackup) {
			b.Status.Phase, b.Status.FinishedAt, b.Status.Deployments = v1alpha1.OperationSucceeded, &started, []v1alpha1.OperationDeployment{ended}
		})
	}}
	r, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, b)
	if d := b.Status.Deployments; b.Status.Phase != v1alpha1.OperationSucceeded || len(d) != 1 || d[0].Phase != v1alpha1.OperationSucceeded || d[0].Size != 1234 {
		t.Fatalf("the backup after progress overtaken by the next leader's record of its end: %s, deployments %+v; want hub Succeeded, 1234 bytes", b.Status.Phase, d)
	}
}
