package operation_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/cachetest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// operations starts a control plane with the agent's namespace and a
// deployment's.
func operations(t *testing.T) (context.Context, client.Client) {
	_, cl := agenttest.StartCluster(t, testcluster.Options{})
	ctx := context.Background()
	for _, ns := range []string{"styrmin-system", "data-hub"} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, cl
}

// options are the operation controllers' options reading through cache
// and api. Git declares no environment (a backup or restore that starts is
// refused); the drivers are never read.
func options(cache client.Client, api client.Reader) operation.Options {
	noEnvironments := operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) { return nil, nil })
	return operation.Options{Client: cache, APIReader: api, Drivers: driversource.NewRepoDrivers(nil, nil, driversource.LoadOptions{}),
		Settings: noEnvironments, Namespace: "styrmin-system", Cluster: "local"}
}

// hubID is the deployment the operations here act on.
func hubID() v1alpha1.DeploymentID {
	return v1alpha1.DeploymentID{Cluster: "local", Environment: "data", Name: "hub"}
}

// newBackup creates a StyrminBackup of local/data with the operations'
// finalizer, then writes status. It returns the copy from before the status
// write too (what a cache behind that write holds).
func newBackup(ctx context.Context, t *testing.T, cl client.Client, name string, status v1alpha1.StyrminBackupStatus) (b, before *v1alpha1.StyrminBackup) {
	t.Helper()
	b = &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: name, Finalizers: []string{operation.Finalizer}},
		Spec:       v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "data"},
	}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	before = b.DeepCopy()
	b.Status = status
	if err := cl.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	return b, before
}

// newRestore creates a StyrminRestore of backup with the operations'
// finalizer, then writes status unless it is empty.
func newRestore(ctx context.Context, t *testing.T, cl client.Client, name, backup string, status v1alpha1.StyrminRestoreStatus) *v1alpha1.StyrminRestore {
	t.Helper()
	rs := &v1alpha1.StyrminRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: name, Finalizers: []string{operation.Finalizer}},
		Spec:       v1alpha1.StyrminRestoreSpec{Backup: backup},
	}
	if err := cl.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if status.Phase != "" {
		rs.Status = status
		if err := cl.Status().Update(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

// newOperationTask creates hub's task of an operation, from and to the
// sequences given, then writes status unless it is empty.
func newOperationTask(ctx context.Context, t *testing.T, cl client.Client, name string, op v1alpha1.TaskOperation, from, to int64, status v1alpha1.StyrminTaskStatus) *v1alpha1.StyrminTask {
	t.Helper()
	labels := hubID().Labels()
	labels[v1alpha1.LabelOperation] = op.Name
	wf := v1alpha1.WorkflowBackup
	if op.Kind == v1alpha1.OperationRestore {
		wf = v1alpha1.WorkflowRestore
	}
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: "data-hub", Name: name, Labels: labels},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: hubID(), Namespace: "data-hub", Workflow: wf, FromSequence: from, ToSequence: to,
			Lock: v1alpha1.LockRef{Commit: "unknown", Path: "locks/local/data/hub.lock.yaml"}, Operation: &op},
	}
	if err := cl.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if status.Phase != "" {
		tk.Status = status
		if err := cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	return tk
}

// reconcileAndRead reconciles obj with r, then reads it back; false when
// it is gone.
func reconcileAndRead(ctx context.Context, t *testing.T, cl client.Client, r reconcile.Reconciler, obj client.Object) bool {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	err := cl.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestABackupStartedIsNotStartedOrRefusedAgainFromACacheBehindItsStart
// pins the read before a backup starts. The start writes Running and the
// backup's plan, then makes its tasks; the finalizer's patch has queued
// the backup again already, and a cache that has not seen the start's
// write shows it never started. Started again from that copy, with the
// environment's settings changed meanwhile (here: git no longer declares
// it), it was refused and ended Failed while its tasks ran, their results
// never recorded.
func TestABackupStartedIsNotStartedOrRefusedAgainFromACacheBehindItsStart(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	// The start, as the controller wrote it: Running, one deployment's
	// task planned, then made.
	now := metav1.Now()
	b, before := newBackup(ctx, t, cl, "nightly", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationRunning, Location: "s3://backups/local/data", StartedAt: &now,
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-backup-nightly-1", Phase: v1alpha1.OperationPending,
			Artifact: "s3://backups/local/data/nightly/hub", Sequence: 3}}})
	started := *b.Status.StartedAt // as stored: whole seconds
	newOperationTask(ctx, t, cl, "hub-backup-nightly-1", v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: b.Name, BackupID: b.Name,
		Artifact: "s3://backups/local/data/nightly/hub", Attempt: 1}, 3, 3, v1alpha1.StyrminTaskStatus{})

	// The cache shows neither the start nor its task.
	r, err := operation.NewBackupReconciler(options(cacheWithoutTasks{Client: cachetest.Stale{Client: cl, Copy: before}}, cl))
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, b)
	if b.Status.Phase != v1alpha1.OperationRunning || b.Status.Message != "" || b.Status.StartedAt == nil ||
		!b.Status.StartedAt.Equal(&started) || len(b.Status.Deployments) != 1 {
		t.Fatalf("the backup after a reconcile from a copy before its start: %s %q, started %v, %d deployments; want it running as started",
			b.Status.Phase, b.Status.Message, b.Status.StartedAt, len(b.Status.Deployments))
	}
}

// cacheWithoutTasks is a cache that has not seen the operation tasks made
// a moment ago: it lists none and finds none.
type cacheWithoutTasks struct{ client.Client }

func (c cacheWithoutTasks) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*v1alpha1.StyrminTask); ok {
		return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("styrmintasks").GroupResource(), key.Name)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c cacheWithoutTasks) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*v1alpha1.StyrminTaskList); ok {
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}

// TestADeletedRestoreDeletesATaskItsCacheDoesNotShowYet pins where a
// deleted operation finds its tasks: the API server. A restore deleted a
// moment after its start (or a retry) made a task the cache does not show
// yet; left behind, the task ran without its restore, and a failure of it
// held the deployment's changes, naming a restore that was gone.
func TestADeletedRestoreDeletesATaskItsCacheDoesNotShowYet(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	rs := newRestore(ctx, t, cl, "back-to-monday", "monday", v1alpha1.StyrminRestoreStatus{})
	task := newOperationTask(ctx, t, cl, "hub-restore-back-to-monday-1", v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: rs.Name,
		BackupID: "monday", Artifact: "s3://backups/local/data/monday/hub", Attempt: 1}, 0, 3, v1alpha1.StyrminTaskStatus{})
	if err := cl.Delete(ctx, rs); err != nil {
		t.Fatal(err)
	}

	r, err := operation.NewRestoreReconciler(options(cacheWithoutTasks{Client: cl}, cl))
	if err != nil {
		t.Fatal(err)
	}
	if reconcileAndRead(ctx, t, cl, r, rs) {
		t.Fatalf("the restore is still there: finalizers %v", rs.Finalizers)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(task), task); err == nil {
		t.Fatalf("the restore's task %s/%s is left after the restore was deleted", task.Namespace, task.Name)
	}
}

// TestABackupRecordsTheDriverOfTheInstanceItsTaskBackedUp pins what a
// backup records of a deployment whose change was pending when the backup
// started: its task runs after that change, so the data it takes is the
// newer instance's, and a restore of it must be checked against that
// instance's driver, not the one running at the start.
func TestABackupRecordsTheDriverOfTheInstanceItsTaskBackedUp(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	upgraded := v1alpha1.DriverRef{Name: "graphhub", Version: "2.0.0"}
	sd := &v1alpha1.StyrminDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "data-hub", Name: "hub", Labels: hubID().Labels()},
		Spec: v1alpha1.StyrminDeploymentSpec{Deployment: hubID(), Sequence: 4, Driver: upgraded, AppVersion: "2.0.0",
			Digest: "sha256:" + strings.Repeat("ab", 32)},
	}
	if err := cl.Create(ctx, sd); err != nil {
		t.Fatal(err)
	}
	started := metav1.Now()
	b, _ := newBackup(ctx, t, cl, "nightly", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationRunning, Location: "s3://backups/local/data", StartedAt: &started,
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-backup-nightly-1", Phase: v1alpha1.OperationPending,
			Artifact: "s3://backups/local/data/nightly/hub", Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}})
	// Its task ran after the change to sequence 4.
	finished := metav1.Now()
	newOperationTask(ctx, t, cl, "hub-backup-nightly-1", v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: b.Name, BackupID: b.Name,
		Artifact: "s3://backups/local/data/nightly/hub", Attempt: 1}, 3, 4,
		v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, Workflow: v1alpha1.WorkflowBackup, FromSequence: 4, StartedAt: &started, FinishedAt: &finished})

	r, err := operation.NewBackupReconciler(options(cl, cl))
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, b)
	if d := b.Status.Deployments[0]; b.Status.Phase != v1alpha1.OperationSucceeded || d.Sequence != 4 || d.Driver != upgraded {
		t.Fatalf("the backup: %s, hub at sequence %d with driver %+v; want it succeeded with sequence 4's driver %+v", b.Status.Phase, d.Sequence, d.Driver, upgraded)
	}
}

// TestABackupBeingDeletedKeepsItsArtefactsWhileARestoreReadsIt pins the
// two writers of a backup's artefacts: its deletion (retention, or by
// hand) deletes them, a restore reads them. A new restore of a backup being
// deleted is refused; a restore that reads it (started before the deletion,
// or checked it a moment before) keeps the deletion waiting until it ends;
// a failed one's retry is refused then.
func TestABackupBeingDeletedKeepsItsArtefactsWhileARestoreReadsIt(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	b, _ := newBackup(ctx, t, cl, "monday", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "s3://backups/local/data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-backup-monday-1", Phase: v1alpha1.OperationSucceeded,
			Artifact: "s3://backups/local/data/monday/hub", Sequence: 3, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}}}})
	reading := newRestore(ctx, t, cl, "back-to-monday", b.Name, v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationRunning, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-restore-back-to-monday-1", Phase: v1alpha1.OperationRunning}}})
	if err := cl.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	backups, err := operation.NewBackupReconciler(options(cl, cl))
	if err != nil {
		t.Fatal(err)
	}
	restores, err := operation.NewRestoreReconciler(options(cl, cl))
	if err != nil {
		t.Fatal(err)
	}

	if !reconcileAndRead(ctx, t, cl, backups, b) {
		t.Fatal("the backup a restore reads went at its deletion")
	}
	// It says why it stays, naming the restore.
	if c := apimeta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue ||
		c.Reason != v1alpha1.ReasonDeletionWaitsForRestore || !strings.Contains(c.Message, "StyrminRestore back-to-monday") {
		t.Fatalf("a backup whose deletion waits for a restore: Reconciling %+v, want True, %s, naming the restore", c, v1alpha1.ReasonDeletionWaitsForRestore)
	}

	again := newRestore(ctx, t, cl, "again", b.Name, v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, restores, again)
	if again.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(again.Status.Message, "StyrminBackup monday is being deleted") {
		t.Fatalf("a restore of a backup being deleted: %s %q, want it refused", again.Status.Phase, again.Status.Message)
	}

	// The restore that read it fails: it reads nothing until retried, and
	// its retry is refused now that the backup is being deleted.
	reading.Status.Phase = v1alpha1.OperationFailed
	reading.Status.Deployments[0].Phase = v1alpha1.OperationFailed
	if err := cl.Status().Update(ctx, reading); err != nil {
		t.Fatal(err)
	}
	reading.Spec.Retry = "1"
	if err := cl.Update(ctx, reading); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, restores, reading)
	if reading.Status.Phase != v1alpha1.OperationFailed || reading.Status.ObservedRetry != "1" || reading.Status.Deployments[0].Attempt > 1 ||
		!strings.Contains(reading.Status.Message, "retry refused: ") || !strings.Contains(reading.Status.Message, "being deleted") {
		t.Fatalf("the retry of a restore whose backup is being deleted: %s %q (retry %q observed, attempt %d), want it refused",
			reading.Status.Phase, reading.Status.Message, reading.Status.ObservedRetry, reading.Status.Deployments[0].Attempt)
	}
	if reconcileAndRead(ctx, t, cl, backups, b) {
		t.Fatalf("the backup is left once no restore reads it (one failed, one refused): finalizers %v", b.Finalizers)
	}
}

// TestABackupWhoseTaskWasNeverMadeDoesNotStayRunning pins what a backup
// does with a deployment its start planned but whose task it could not
// make (the agent stopped in between, or the create failed): it makes the
// task again, and when the deployment no longer runs, that deployment ends
// Failed, and so does the backup, rather than running for ever.
func TestABackupWhoseTaskWasNeverMadeDoesNotStayRunning(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	started := metav1.Now()
	b, _ := newBackup(ctx, t, cl, "nightly", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationRunning, Location: "s3://backups/local/data", StartedAt: &started,
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-backup-nightly-1", Phase: v1alpha1.OperationPending,
			Artifact: "s3://backups/local/data/nightly/hub", Sequence: 3}}})
	r, err := operation.NewBackupReconciler(options(cl, cl))
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, r, b)
	if d := b.Status.Deployments[0]; b.Status.Phase != v1alpha1.OperationFailed || d.Phase != v1alpha1.OperationFailed || !strings.Contains(d.Message, "no such deployment runs in this cluster") {
		t.Fatalf("a backup whose task was never made, of a deployment gone: %s, hub %s %q; want both failed, naming why", b.Status.Phase, d.Phase, d.Message)
	}
}

// TestTheLatestBackupACloneRestoresHoldsTheWholeEnvironment pins which
// backup `env clone --from-backup latest` takes: the newest of the whole
// environment, not a newer one of one deployment (an upgrade's backup
// first), from which the clone's other deployments would restore
// artefacts it does not hold.
func TestTheLatestBackupACloneRestoresHoldsTheWholeEnvironment(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	finished := func(at time.Time) *metav1.Time { m := metav1.NewTime(at); return &m }
	now := time.Now()
	whole, _ := newBackup(ctx, t, cl, "nightly", v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, FinishedAt: finished(now.Add(-time.Hour))})
	one := &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "data-hub-before-4", Finalizers: []string{operation.Finalizer}},
		Spec:       v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "data", Deployments: []string{"hub"}},
	}
	if err := cl.Create(ctx, one); err != nil {
		t.Fatal(err)
	}
	one.Status = v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, FinishedAt: finished(now)}
	if err := cl.Status().Update(ctx, one); err != nil {
		t.Fatal(err)
	}
	got, err := operation.LatestBackup(ctx, cl, "styrmin-system", "local", "data")
	if err != nil || got.Name != whole.Name {
		t.Fatalf("the latest backup: %v (%v), want %s, the newest of the whole environment", nameOf(got), err, whole.Name)
	}
	whole.Status.Phase = v1alpha1.OperationFailed
	if err := cl.Status().Update(ctx, whole); err != nil {
		t.Fatal(err)
	}
	if got, err := operation.LatestBackup(ctx, cl, "styrmin-system", "local", "data"); err == nil || !strings.Contains(err.Error(), "no backup of all its deployments") {
		t.Fatalf("with only a backup of one deployment: %v (%v), want an error saying none holds all", nameOf(got), err)
	}
}

func nameOf(b *v1alpha1.StyrminBackup) string {
	if b == nil {
		return "none"
	}
	return b.Name
}

// TestOperationsOnAnEnvironmentWhoseSettingsGitCannotReadAreStalledNamingTheFile
// pins what a broken environment file does to its environment's
// operations: a new backup and a new restore end Failed at once, Stalled,
// naming the file and the field. The settings' error was an error of the
// start, retried for ever: the backup stayed with no phase and no status
// (`backup create --wait` hung to its timeout), and the restore, which
// read the settings only as it made its tasks, stayed Running with none,
// its backup's deletion waiting for it.
func TestOperationsOnAnEnvironmentWhoseSettingsGitCannotReadAreStalledNamingTheFile(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	broken := &resolver.ConfigError{File: "clusters/local/environments/data/environment.cue", Line: 4, Column: 12, Field: "backups.schedule",
		Msg: `"every night" is no cron expression: expected five fields`}
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		// As resolver.BackupSettings gives them: the other environments
		// read, data with its error, and the error.
		return []resolver.EnvironmentBackups{
			{Cluster: "local", Environment: "data", Err: broken},
			{Cluster: "local", Environment: "ops", Location: "pvc://backups/ops"},
		}, broken
	})
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	restores, err := operation.NewRestoreReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	stalled := func(what string, phase v1alpha1.OperationPhase, conds []metav1.Condition) {
		t.Helper()
		c := apimeta.FindStatusCondition(conds, v1alpha1.ConditionStalled)
		if phase != v1alpha1.OperationFailed || c == nil || c.Status != metav1.ConditionTrue ||
			!strings.Contains(c.Message, broken.File+":4:12") || !strings.Contains(c.Message, "backups.schedule") {
			t.Fatalf("%s of an environment whose file is broken: %s, Stalled %+v; want it Failed and Stalled, naming %s and backups.schedule", what, phase, c, broken.File)
		}
	}

	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "nightly"}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, backups, b)
	stalled("a backup", b.Status.Phase, b.Status.Conditions)

	rs := newRestore(ctx, t, cl, "back-to-monday", "monday", v1alpha1.StyrminRestoreStatus{})
	reconcileAndRead(ctx, t, cl, restores, rs)
	stalled("a restore", rs.Status.Phase, rs.Status.Conditions)
	if len(rs.Status.Deployments) != 0 {
		t.Fatalf("the refused restore plans %+v, want nothing: it holds no deployment", rs.Status.Deployments)
	}
	var tasks v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &tasks, client.InNamespace("data-hub")); err != nil || len(tasks.Items) != 0 {
		t.Fatalf("hub's tasks after both refusals: %d (%v), want none", len(tasks.Items), err)
	}
}
