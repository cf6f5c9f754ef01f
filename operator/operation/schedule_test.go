package operation_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/logtest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// scheduler is the backup scheduler of cluster local over cl, with git
// declaring settings and the clock at *now.
func scheduler(t *testing.T, cl client.Client, now *time.Time, settings ...resolver.EnvironmentBackups) *operation.Scheduler {
	t.Helper()
	opts := options(cl, cl)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		var errs []string
		for _, e := range settings {
			if e.Err != nil {
				errs = append(errs, e.Err.Error())
			}
		}
		if len(errs) > 0 {
			return settings, &resolver.ConfigError{File: "clusters", Msg: strings.Join(errs, "\n")}
		}
		return settings, nil
	})
	opts.Now = func() time.Time { return *now }
	s, err := operation.NewScheduler(opts, 0, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newScheduled creates the backup env's schedule made for time at, ended
// in phase (none: not started).
func newScheduled(ctx context.Context, t *testing.T, cl client.Client, env string, at time.Time, phase v1alpha1.OperationPhase) *v1alpha1.StyrminBackup {
	t.Helper()
	b := &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: env + "-" + at.UTC().Format("20060102-1504"),
			Labels:      map[string]string{operation.LabelSchedule: env, v1alpha1.LabelCluster: "local", v1alpha1.LabelEnvironment: env},
			Annotations: map[string]string{operation.AnnotationScheduledFor: at.UTC().Format(time.RFC3339)}},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: env},
	}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	if phase != "" {
		b.Status.Phase = phase
		if err := cl.Status().Update(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// backupNames are the names of the backups in the agent's namespace that
// are not being deleted, sorted.
func backupNames(ctx context.Context, t *testing.T, cl client.Client) []string {
	t.Helper()
	var list v1alpha1.StyrminBackupList
	if err := cl.List(ctx, &list, client.InNamespace("styrmin-system")); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range list.Items {
		if b.DeletionTimestamp.IsZero() {
			out = append(out, b.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestAScheduleGoesOnBesideAnEnvironmentWhoseSettingsGitCannotRead pins
// what one broken environment file stops: that environment's schedule
// alone. The read of every environment's settings failed on it, and the
// scheduler made and deleted no backup in any environment.
func TestAScheduleGoesOnBesideAnEnvironmentWhoseSettingsGitCannotRead(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	broken := &resolver.ConfigError{File: "clusters/local/environments/data/environment.cue", Line: 2, Field: "backups.keep", Msg: "is 0: keep at least 1 backup (or remove the field)"}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := scheduler(t, cl, &now,
		resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Err: broken},
		resolver.EnvironmentBackups{Cluster: "local", Environment: "ops", Location: "pvc://backups/ops", Schedule: "0 3 * * *"})
	for _, at := range []time.Time{now, time.Date(2026, 12, 2, 3, 0, 30, 0, time.UTC)} {
		now = at
		if err := s.Tick(ctx); err == nil || !strings.Contains(err.Error(), broken.File) {
			t.Fatalf("a tick at %s: %v, want an error naming %s", at, err, broken.File)
		}
	}
	if got := backupNames(ctx, t, cl); !slices.Equal(got, []string{"ops-20261202-0300"}) {
		t.Fatalf("the backups beside data's broken file: %v, want ops' of 03:00", got)
	}
}

// TestFailedScheduledBackupsAreKeptUpToABound pins retention when a
// schedule's backups fail (a bad Secret): the failed ones newer than the
// keep-th success were all kept, and with none succeeding one more piled
// up at every time of the schedule, for ever.
func TestFailedScheduledBackupsAreKeptUpToABound(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	var want []string
	for day := 1; day <= 5; day++ {
		b := newScheduled(ctx, t, cl, "data", time.Date(2026, 12, day, 3, 0, 0, 0, time.UTC), v1alpha1.OperationFailed)
		if day > 5-operation.KeepFailed {
			want = append(want, b.Name)
		}
	}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	s := scheduler(t, cl, &now, resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Keep: 2})
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := backupNames(ctx, t, cl); !slices.Equal(got, want) {
		t.Fatalf("five failed backups with keep 2: %v left, want the newest %d, %v", got, operation.KeepFailed, want)
	}
}

// TestAScheduleMakesItsNextBackupAndSupersedesThePreviousThatHasNotEnded
// pins a backup that outlasts its schedule's period. Another beside it at
// each time piled up; then none was made while it had not ended, and one
// part held for good stopped the schedule for the whole environment. The
// next one is made at its time, and every older one that has not ended is
// marked superseded by the newest, saying so: at most one waits.
func TestAScheduleMakesItsNextBackupAndSupersedesThePreviousThatHasNotEnded(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	prev := newScheduled(ctx, t, cl, "data", time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC), v1alpha1.OperationRunning)
	now := time.Date(2026, 12, 2, 3, 0, 30, 0, time.UTC)
	s := scheduler(t, cl, &now, resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"})
	superseded := func(b *v1alpha1.StyrminBackup, by string) {
		t.Helper()
		if err := cl.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			t.Fatal(err)
		}
		if got := b.Annotations[operation.AnnotationSupersededBy]; got != by {
			t.Fatalf("%s superseded by %q, want %q", b.Name, got, by)
		}
		if c := apimeta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReconciling); c == nil || c.Reason != operation.ReasonScheduleSuperseded ||
			!strings.Contains(c.Message, "next backup "+by+" while this one had not ended") {
			t.Fatalf("%s's Reconciling: %+v, want %s naming %s", b.Name, c, operation.ReasonScheduleSuperseded, by)
		}
	}
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := backupNames(ctx, t, cl); !slices.Equal(got, []string{prev.Name, "data-20261202-0300"}) {
		t.Fatalf("the schedule's backups while %s runs: %v, want the time's made beside it", prev.Name, got)
	}
	superseded(prev, "data-20261202-0300")

	// Neither ended by the next time: both are superseded by its backup.
	now = now.Add(24 * time.Hour)
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := backupNames(ctx, t, cl); !slices.Equal(got, []string{prev.Name, "data-20261202-0300", "data-20261203-0300"}) {
		t.Fatalf("the schedule's backups a day later: %v, want the time's made", got)
	}
	superseded(prev, "data-20261203-0300")
	superseded(&v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "data-20261202-0300"}}, "data-20261203-0300")
}

// TestAScheduledBackupHeldByAFailedRestoreDoesNotStopTheNextNight pins
// what a failed restore of one deployment does to its environment's
// schedule: the backup task of hub, held by it, waited for ever, its
// backup never ended, and no backup was made for db or any other
// deployment again. The next night's backup is made; the held part ends
// Failed, superseded, naming the next backup and why it waited, its task
// deleted before it ran; db's part, which succeeded, stays restorable.
func TestAScheduledBackupHeldByAFailedRestoreDoesNotStopTheNextNight(t *testing.T) {
	t.Parallel()
	ctx, cl, _, opts := restoring(t)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		return []resolver.EnvironmentBackups{{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"}}, nil
	})
	// Restore fix of hub failed; the night's backup task of hub, ordered
	// after it, waits for it.
	newRestore(ctx, t, cl, "fix", "monday", v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationFailed, Environment: "data",
		Deployments: []v1alpha1.OperationDeployment{{Name: "hub", Namespace: "data-hub", Task: "hub-restore-fix", Phase: v1alpha1.OperationFailed}}})
	started := metav1.Now()
	newOperationTask(ctx, t, cl, "hub-restore-fix", v1alpha1.TaskOperation{Kind: v1alpha1.OperationRestore, Name: "fix", BackupID: "monday", Artifact: "s3://backups/local/data/monday/hub", Attempt: 1}, 3, 3,
		v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskFailed, StartedAt: &started, FinishedAt: &started, Message: "pg_restore failed"})
	night := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	prev := newScheduled(ctx, t, cl, "data", night, "")
	hubTask := task.OperationTaskName("hub", v1alpha1.OperationBackup, prev.Name, 1)
	prev.Finalizers = []string{operation.Finalizer}
	if err := cl.Update(ctx, prev); err != nil {
		t.Fatal(err)
	}
	prev.Status = v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationRunning, Location: "pvc://backups/data", StartedAt: &started, Deployments: []v1alpha1.OperationDeployment{
		{Name: "db", Namespace: "data-db", Task: "db-backup", Phase: v1alpha1.OperationSucceeded, StartedAt: &started, FinishedAt: &started, Artifact: "pvc://backups/data/" + prev.Name + "/db", Sequence: 2},
		{Name: "hub", Namespace: "data-hub", Task: hubTask, Phase: v1alpha1.OperationPending, Artifact: "pvc://backups/data/" + prev.Name + "/hub", Sequence: 3}}}
	if err := cl.Status().Update(ctx, prev); err != nil {
		t.Fatal(err)
	}
	held := newOperationTask(ctx, t, cl, hubTask, v1alpha1.TaskOperation{Kind: v1alpha1.OperationBackup, Name: prev.Name, BackupID: prev.Name, Artifact: "pvc://backups/data/" + prev.Name + "/hub", Attempt: 1}, 3, 3,
		v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskPending, Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonRestoreInProgress, Message: "waits for StyrminRestore fix, which failed", LastTransitionTime: started}}})

	now := night.Add(24*time.Hour + 30*time.Second)
	s, err := operation.NewScheduler(withClock(opts, &now), 0, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := backupNames(ctx, t, cl); !slices.Contains(got, "data-20261202-0300") {
		t.Fatalf("the backups the next night, %s held: %v, want data-20261202-0300 made", prev.Name, got)
	}
	backups, err := operation.NewBackupReconciler(opts)
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, backups, prev)
	db, hub := prev.Status.Deployments[0], prev.Status.Deployments[1]
	if prev.Status.Phase != v1alpha1.OperationFailed || hub.Phase != v1alpha1.OperationFailed ||
		!strings.Contains(hub.Message, "superseded by the schedule's next backup data-20261202-0300") || !strings.Contains(hub.Message, "waits for StyrminRestore fix") {
		t.Fatalf("%s once superseded: %s, hub %s %q; want both failed, hub naming the next backup and why it waited", prev.Name, prev.Status.Phase, hub.Phase, hub.Message)
	}
	if db.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("db's part once %s was superseded: %s %q, want it kept Succeeded", prev.Name, db.Phase, db.Message)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(held), held); !apierrors.IsNotFound(err) {
		t.Fatalf("hub's held backup task once superseded: %v (phase %s), want it deleted", err, held.Status.Phase)
	}
}

// TestAScheduledBackupDeletedByHandIsNotMadeAgain pins what the schedule
// does when someone deletes one of its backups: nothing. The next look
// worked the last time out from the backups left, found the deleted
// one's time without a backup and made it again under its name: a new
// backup with the deleted one's ID and artefact path, which a clone or
// restore naming that ID then read. Deleting every scheduled backup made
// one at once. The next time of the schedule is made as ever.
func TestAScheduledBackupDeletedByHandIsNotMadeAgain(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	before := newScheduled(ctx, t, cl, "data", time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC), v1alpha1.OperationSucceeded)
	now := time.Date(2026, 12, 1, 3, 0, 30, 0, time.UTC)
	s := scheduler(t, cl, &now, resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"})
	tick := func(want ...string) {
		t.Helper()
		if err := s.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if got := backupNames(ctx, t, cl); !slices.Equal(got, want) {
			t.Fatalf("the backups at %s: %v, want %v", now.Format(time.RFC3339), got, want)
		}
	}
	deleteByHand := func(name string) {
		t.Helper()
		if err := cl.Delete(ctx, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	tick(before.Name, "data-20261201-0300")

	now = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	deleteByHand("data-20261201-0300")
	tick(before.Name)
	deleteByHand(before.Name)
	tick()

	now = time.Date(2026, 12, 2, 3, 0, 30, 0, time.UTC)
	tick("data-20261202-0300")
}

// TestARestartedSchedulerMakesUpAMissedTimeOnlyWithinItsCatchUpWindow
// pins what a scheduler that has just started makes of a time that
// passed before it looked, with no backup for it: it cannot tell a time
// missed while no agent ran from a backup deleted by hand since. Soon
// after the time (an agent restarted over it) it makes it up; hours later
// it leaves it, for the schedule's next time.
func TestARestartedSchedulerMakesUpAMissedTimeOnlyWithinItsCatchUpWindow(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	before := newScheduled(ctx, t, cl, "data", time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC), v1alpha1.OperationSucceeded)
	settings := resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"}
	for _, tc := range []struct {
		now  time.Time
		want []string
	}{
		{time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), []string{before.Name}},
		{time.Date(2026, 12, 2, 3, 20, 0, 0, time.UTC), []string{before.Name, "data-20261202-0300"}},
	} {
		now := tc.now
		if err := scheduler(t, cl, &now, settings).Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if got := backupNames(ctx, t, cl); !slices.Equal(got, tc.want) {
			t.Fatalf("the backups a scheduler started at %s made: %v, want %v", now.Format(time.RFC3339), got, tc.want)
		}
	}
}

// withClock is opts with the clock at *now.
func withClock(opts operation.Options, now *time.Time) operation.Options {
	opts.Now = func() time.Time { return *now }
	return opts
}

// newBackupFirst records the backup an upgrade of env's deployment dep to
// sequence seq took first, of the data of sequence backedUp, and returns
// its name.
func newBackupFirst(ctx context.Context, t *testing.T, cl client.Client, env, dep string, seq, backedUp int) string {
	t.Helper()
	name := env + "-" + dep + "-before-" + strconv.Itoa(seq)
	b := &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: name, Labels: map[string]string{
			v1alpha1.LabelCluster: "local", v1alpha1.LabelEnvironment: env, task.LabelTask: dep + "-" + strconv.Itoa(seq)}},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: env, Deployments: []string{dep}},
	}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status.Phase = v1alpha1.OperationSucceeded
	b.Status.Deployments = []v1alpha1.OperationDeployment{{Name: dep, Namespace: env + "-" + dep, Phase: v1alpha1.OperationSucceeded, Sequence: int64(backedUp)}}
	if err := cl.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestBackupsTakenBeforeUpgradesAreKeptToTheNewestFewPerDeployment pins
// retention of the backups upgrades take first: they have no schedule,
// and every upgrade that backs up first left one more that nothing
// deleted. The newest few of each deployment are kept, and one a restore
// reads.
func TestBackupsTakenBeforeUpgradesAreKeptToTheNewestFewPerDeployment(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	first := func(dep string, seq int) string { return newBackupFirst(ctx, t, cl, "data", dep, seq, seq-1) }
	var hub []string
	for seq := 1; seq <= 6; seq++ {
		hub = append(hub, first("hub", seq))
	}
	web := first("web", 2)
	newRestore(ctx, t, cl, "undo", hub[0], v1alpha1.StyrminRestoreStatus{Phase: v1alpha1.OperationRunning, Environment: "data"})

	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	s := scheduler(t, cl, &now, resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data"})
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	want := append([]string{hub[0]}, hub[len(hub)-operation.KeepBackupsFirst:]...)
	want = append(want, web)
	slices.Sort(want)
	if got := backupNames(ctx, t, cl); !slices.Equal(got, want) {
		t.Fatalf("six backups of hub taken before upgrades, one restored from: %v left, want %v (the newest %d, the one read, web's)", got, want, operation.KeepBackupsFirst)
	}
}

// TestTheFirstBackupBeforeAFailedUpgradeIsKeptThroughItsRetries pins
// retention when an upgrade of hub from sequence 4 failed halfway and was
// run again by retries and fixes: each backed up sequence 4 first, by then
// half migrated, and after three of them the only backup of the data from
// before the upgrade (before-5) was deleted with its artefact. The oldest
// backup of each of the newest sequences is kept besides the newest few.
func TestTheFirstBackupBeforeAFailedUpgradeIsKeptThroughItsRetries(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	var hub []string
	for seq := 5; seq <= 9; seq++ {
		hub = append(hub, newBackupFirst(ctx, t, cl, "data", "hub", seq, 4))
	}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	s := scheduler(t, cl, &now, resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data"})
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"data-hub-before-5", "data-hub-before-7", "data-hub-before-8", "data-hub-before-9"}
	if got := backupNames(ctx, t, cl); !slices.Equal(got, want) {
		t.Fatalf("%v taken before upgrades, all of sequence 4: %v left, want %v (the first, and the newest %d)", hub, got, want, operation.KeepBackupsFirst)
	}
}

// TestBackupsTakenBeforeUpgradesInAnEnvironmentGitCannotReadAreKept pins
// what unreadable settings stop: Tick says no retention runs for such an
// environment, and its backups taken before upgrades were deleted all the
// same.
func TestBackupsTakenBeforeUpgradesInAnEnvironmentGitCannotReadAreKept(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	var want []string
	for seq := 1; seq <= 5; seq++ {
		want = append(want, newBackupFirst(ctx, t, cl, "data", "hub", seq, seq-1))
	}
	broken := &resolver.ConfigError{File: "clusters/local/environments/data/environment.cue", Line: 2, Field: "backups.keep", Msg: "is 0: keep at least 1 backup (or remove the field)"}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	s := scheduler(t, cl, &now, resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Err: broken})
	if err := s.Tick(ctx); err == nil || !strings.Contains(err.Error(), "no scheduled backup or retention") {
		t.Fatalf("a tick with data's settings unreadable: %v, want an error saying no retention", err)
	}
	if got := backupNames(ctx, t, cl); !slices.Equal(got, want) {
		t.Fatalf("five backups of hub taken before upgrades, data's settings unreadable: %v left, want all %v", got, want)
	}
}

// TestATimePassedWhileGitCouldNotBeReadIsMadeOnceItCanBe: a replica
// elected just before the night's time whose settings cannot be read
// until well after it (its clone behind, the git host down) was running
// at that time: the time is made once the settings are read, however
// late, rather than taken for one missed while no agent ran.
func TestATimePassedWhileGitCouldNotBeReadIsMadeOnceItCanBe(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	before := newScheduled(ctx, t, cl, "data", time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC), v1alpha1.OperationSucceeded)
	settings := resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *",
		Err: errors.New("the clone does not hold the commit yet")}
	now := time.Date(2026, 12, 1, 2, 58, 0, 0, time.UTC)
	opts := withClock(options(cl, cl), &now)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		if settings.Err != nil {
			return nil, settings.Err
		}
		return []resolver.EnvironmentBackups{settings}, nil
	})
	s, err := operation.NewScheduler(opts, 0, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tick(ctx); err == nil {
		t.Fatal("a tick whose settings cannot be read: no error")
	}
	now = time.Date(2026, 12, 1, 4, 30, 0, 0, time.UTC)
	settings.Err = nil
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := backupNames(ctx, t, cl), []string{before.Name, "data-20261201-0300"}; !slices.Equal(got, want) {
		t.Fatalf("backups %v, want %v", got, want)
	}
}

// recordingScheduler is scheduler with the agent's StyrminSource, made
// here when it is not yet, to record where the schedules stand on.
func recordingScheduler(t *testing.T, cl client.Client, now *time.Time, settings ...resolver.EnvironmentBackups) *operation.Scheduler {
	t.Helper()
	ctx := context.Background()
	src := &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "styrmin"},
		Spec: v1alpha1.StyrminSourceSpec{URL: "https://git.example/config.git", Cluster: "local"}}
	if err := cl.Create(ctx, src); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	opts := withClock(options(cl, cl), now)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) { return settings, nil })
	opts.Source = client.ObjectKeyFromObject(src)
	s, err := operation.NewScheduler(opts, 0, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// scheduleRecord is what the StyrminSource records of the schedules.
func scheduleRecord(ctx context.Context, t *testing.T, cl client.Client) map[string]string {
	t.Helper()
	var src v1alpha1.StyrminSource
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "styrmin-system", Name: "styrmin"}, &src); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range src.Status.ScheduledBackups {
		out[r.Environment] = r.Time.UTC().Format(time.RFC3339)
	}
	return out
}

// TestARestartedSchedulerMakesTheTimeItsRecordSaysWasMissedHoursLate pins
// the record a scheduler keeps on the StyrminSource: an agent down over
// the night's time (a cluster upgrade from 02:00 to 09:00) made no backup
// that night, since a time passed more than CatchUpWindow before the next
// agent looked could as well have been deleted by hand. The record says
// which: the time after the one recorded was missed, and is made (once,
// the newest) however late.
func TestARestartedSchedulerMakesTheTimeItsRecordSaysWasMissedHoursLate(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	data := resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"}
	now := time.Date(2026, 11, 30, 2, 50, 0, 0, time.UTC)
	first := recordingScheduler(t, cl, &now, data)
	for _, now = range []time.Time{now, time.Date(2026, 11, 30, 3, 0, 30, 0, time.UTC)} {
		if err := first.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := scheduleRecord(ctx, t, cl), map[string]string{"data": "2026-11-30T03:00:00Z"}; !maps.Equal(got, want) {
		t.Fatalf("recorded %v, want %v", got, want)
	}
	// No agent from 02:00 on 1 December until 09:00 on 2 December: two
	// times missed, the newest made.
	now = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	if err := recordingScheduler(t, cl, &now, data).Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := backupNames(ctx, t, cl), []string{"data-20261130-0300", "data-20261202-0300"}; !slices.Equal(got, want) {
		t.Fatalf("the backups a scheduler started hours after a time it missed made: %v, want %v", got, want)
	}
	if got, want := scheduleRecord(ctx, t, cl), map[string]string{"data": "2026-12-02T03:00:00Z"}; !maps.Equal(got, want) {
		t.Fatalf("recorded %v, want %v", got, want)
	}
}

// TestARestartedSchedulerDoesNotMakeAgainABackupDeletedByHandItsRecordNames
// pins the other half: a backup deleted by hand minutes after its time,
// the agent restarted soon after (within CatchUpWindow), was made again
// under its name by the new agent, which could not tell it from a time
// missed. The record names the time as made: nothing is made until the
// next.
func TestARestartedSchedulerDoesNotMakeAgainABackupDeletedByHandItsRecordNames(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	data := resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"}
	before := newScheduled(ctx, t, cl, "data", time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC), v1alpha1.OperationSucceeded)
	now := time.Date(2026, 12, 1, 2, 50, 0, 0, time.UTC)
	first := recordingScheduler(t, cl, &now, data)
	for _, now = range []time.Time{now, time.Date(2026, 12, 1, 3, 0, 30, 0, time.UTC)} {
		if err := first.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Delete(ctx, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "data-20261201-0300"}}); err != nil {
		t.Fatal(err)
	}
	now = time.Date(2026, 12, 1, 3, 20, 0, 0, time.UTC)
	next := recordingScheduler(t, cl, &now, data)
	if err := next.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := backupNames(ctx, t, cl), []string{before.Name}; !slices.Equal(got, want) {
		t.Fatalf("a restarted scheduler left %v, want %v (the night's deleted by hand)", got, want)
	}
	now = time.Date(2026, 12, 2, 3, 0, 30, 0, time.UTC)
	if err := next.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := backupNames(ctx, t, cl), []string{before.Name, "data-20261202-0300"}; !slices.Equal(got, want) {
		t.Fatalf("the next night: %v, want %v", got, want)
	}
}

// TestAScheduleRemovedAndAddedAgainStartsAfresh pins what the record
// holds: the schedules the configuration has. One first seen is recorded
// from that look (a new schedule makes no backup of a time before it); one
// removed leaves the record, so a schedule added again months later does
// not make at once the newest time since it went. An environment whose
// settings cannot be read keeps its line.
func TestAScheduleRemovedAndAddedAgainStartsAfresh(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	data := resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"}
	web := resolver.EnvironmentBackups{Cluster: "local", Environment: "web", Location: "pvc://backups/web", Schedule: "0 4 * * *"}
	now := time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	if err := recordingScheduler(t, cl, &now, data, web).Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := scheduleRecord(ctx, t, cl), map[string]string{"data": "2026-12-01T01:00:00Z", "web": "2026-12-01T01:00:00Z"}; !maps.Equal(got, want) {
		t.Fatalf("two schedules first seen: recorded %v, want %v", got, want)
	}
	// data's schedule removed; web's settings unreadable.
	unscheduled, broken := data, web
	unscheduled.Schedule = ""
	broken.Err = errors.New("environment.cue: backups.schedule: expected a string")
	now = time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	if err := recordingScheduler(t, cl, &now, unscheduled, broken).Tick(ctx); err == nil {
		t.Fatal("a look with web's settings unreadable: no error")
	}
	if got, want := scheduleRecord(ctx, t, cl), map[string]string{"web": "2026-12-01T01:00:00Z"}; !maps.Equal(got, want) {
		t.Fatalf("data's schedule removed, web's unreadable: recorded %v, want %v", got, want)
	}
	// data's schedule back weeks later: from then on.
	now = time.Date(2026, 12, 20, 12, 0, 0, 0, time.UTC)
	if err := recordingScheduler(t, cl, &now, data).Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := backupNames(ctx, t, cl); len(got) != 0 {
		t.Fatalf("a schedule added again made %v at once", got)
	}
	if got, want := scheduleRecord(ctx, t, cl), map[string]string{"data": "2026-12-20T12:00:00Z"}; !maps.Equal(got, want) {
		t.Fatalf("data's schedule back, web gone: recorded %v, want %v", got, want)
	}
}

// refusingBackupLists is a client whose List of StyrminBackups fails
// while *refuse is set (an API server answering 503 for a moment).
type refusingBackupLists struct {
	client.Client
	refuse *bool
}

func (c refusingBackupLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*v1alpha1.StyrminBackupList); ok && *c.refuse {
		return apierrors.NewServiceUnavailable("the test refuses the list")
	}
	return c.Client.List(ctx, list, opts...)
}

// TestTheScheduleRecordOutlivesAFailedLookAndAStyrminSourceMadeAgain pins
// that the record is only ever what the schedules say. A restarted
// scheduler whose first look failed for an environment before it saw
// where its schedule stood wrote the record without it, and the next
// agent went back to the catch-up window: a time missed hours ago was
// not made. And a StyrminSource made again (or its field dropped by an
// older agent's write) was not written again until the schedule's next
// time, the scheduler comparing with what it wrote last rather than with
// the object.
func TestTheScheduleRecordOutlivesAFailedLookAndAStyrminSourceMadeAgain(t *testing.T) {
	t.Parallel()
	ctx, api := operations(t)
	refuse := false
	cl := refusingBackupLists{Client: api, refuse: &refuse}
	data := resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"}
	now := time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	first := recordingScheduler(t, cl, &now, data)
	if err := first.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"data": "2026-12-01T01:00:00Z"}
	if got := scheduleRecord(ctx, t, cl); !maps.Equal(got, want) {
		t.Fatalf("first look: recorded %v, want %v", got, want)
	}
	// The StyrminSource made again, empty: the next look writes it.
	if err := cl.Delete(ctx, &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "styrmin"}}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "styrmin"},
		Spec: v1alpha1.StyrminSourceSpec{URL: "https://git.example/config.git", Cluster: "local"}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Minute)
	if err := first.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := scheduleRecord(ctx, t, cl); !maps.Equal(got, want) {
		t.Fatalf("the StyrminSource made again: recorded %v, want %v", got, want)
	}
	// No agent from 02:00 to 09:00; the next one's first look cannot
	// list the backups.
	now = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	restarted := recordingScheduler(t, cl, &now, data)
	refuse = true
	if err := restarted.Tick(ctx); err == nil {
		t.Fatal("a look whose List failed: no error")
	}
	if got := scheduleRecord(ctx, t, cl); !maps.Equal(got, want) {
		t.Fatalf("a look that failed: recorded %v, want %v kept", got, want)
	}
	refuse = false
	now = now.Add(30 * time.Second)
	if err := restarted.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := backupNames(ctx, t, cl), []string{"data-20261201-0300"}; !slices.Equal(got, want) {
		t.Fatalf("the backups after the look that could list: %v, want %v (the time missed, made late)", got, want)
	}
}

// hidingBackupLists is a client whose List of StyrminBackups finds none
// (a cache that has not seen them yet).
type hidingBackupLists struct{ client.Client }

func (c hidingBackupLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*v1alpha1.StyrminBackupList); ok {
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}

// TestAScheduledTimeWhoseNameAnotherBackupHoldsIsNotTakenAsMade pins what
// the schedule does when a backup made by hand holds the name of a time's
// backup (`styrminctl backup create local/dev --name data-20261202-0300`):
// the create found the name taken and took the time as made, so that
// night's backup of data was never made, and nothing said so. The time is
// not made while the name is held, each look says so naming the backup
// that holds it, and it is made once that one is deleted. The schedule's
// own backup at the name (made by an earlier look the cache does not show
// yet) is taken as made, as before. The command line refuses a name of
// that form.
func TestAScheduledTimeWhoseNameAnotherBackupHoldsIsNotTakenAsMade(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	data := resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"}
	newScheduled(ctx, t, cl, "data", time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC), v1alpha1.OperationSucceeded)
	byHand := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "data-20261202-0300",
		Labels: map[string]string{v1alpha1.LabelCluster: "local", v1alpha1.LabelEnvironment: "dev"}},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "dev"}}
	if err := cl.Create(ctx, byHand); err != nil {
		t.Fatal(err)
	}

	now := time.Date(2026, 12, 2, 3, 0, 30, 0, time.UTC)
	s := recordingScheduler(t, cl, &now, data)
	for range 2 {
		err := s.Tick(ctx)
		if err == nil || !strings.Contains(err.Error(), "StyrminBackup styrmin-system/data-20261202-0300 holds its name") ||
			!strings.Contains(err.Error(), "environment dev") || !strings.Contains(err.Error(), "2026-12-02T03:00:00Z") {
			t.Fatalf("a look at %s with data's time's name held by dev's backup: %v, want an error naming that backup and the time", now.Format(time.RFC3339), err)
		}
		if got, want := scheduleRecord(ctx, t, cl), map[string]string{"data": "2026-12-01T03:00:00Z"}; !maps.Equal(got, want) {
			t.Fatalf("recorded %v, want %v: the time whose name is held is not made", got, want)
		}
		now = now.Add(30 * time.Second)
	}

	if err := cl.Delete(ctx, byHand); err != nil {
		t.Fatal(err)
	}
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	var made v1alpha1.StyrminBackup
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "styrmin-system", Name: "data-20261202-0300"}, &made); err != nil ||
		made.Labels[operation.LabelSchedule] != "data" || made.Spec.Environment != "data" {
		t.Fatalf("data-20261202-0300 once the name is free: %v, labels %v, environment %q; want data's scheduled backup", err, made.Labels, made.Spec.Environment)
	}

	// The next night's, made by a look whose record the agent lost, is in
	// no list yet: a new scheduler takes it as made.
	now = time.Date(2026, 12, 3, 3, 0, 30, 0, time.UTC)
	newScheduled(ctx, t, cl, "data", time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC), "")
	if err := recordingScheduler(t, hidingBackupLists{cl}, &now, data).Tick(ctx); err != nil {
		t.Fatalf("a look finding the schedule's own backup at its time's name: %v", err)
	}
	if got, want := scheduleRecord(ctx, t, cl), map[string]string{"data": "2026-12-03T03:00:00Z"}; !maps.Equal(got, want) {
		t.Fatalf("recorded %v, want %v", got, want)
	}

	req := operation.BackupRequest{Namespace: "styrmin-system", Cluster: "local", Environment: "dev", Name: "data-20261204-0300", Now: now}
	if _, err := operation.NewBackup(req); err == nil || !strings.Contains(err.Error(), "scheduled backup") || !strings.Contains(err.Error(), "a schedule of an environment data") {
		t.Fatalf("a backup of dev asked for under data's scheduled name: %v, want it refused naming data's schedule", err)
	}
	for _, name := range []string{"", "before-migration", "dev-20261204-030000"} {
		req.Name = name
		if _, err := operation.NewBackup(req); err != nil {
			t.Errorf("a backup named %q: %v, want it made", name, err)
		}
	}
}

// TestTheSchedulerLogsAnErrorEveryLookMeetsOnceUntilItIsOver: a settings
// file in error, or a scheduled time's name held by another backup, was
// logged at every look (every 30 s) for as long as it lasted, a day for a
// held name. Now it is logged when it starts, and once at info when it is
// over; one that comes back is logged again.
func TestTheSchedulerLogsAnErrorEveryLookMeetsOnceUntilItIsOver(t *testing.T) {
	t.Parallel()
	_, cl := operations(t)
	var broken atomic.Bool
	broken.Store(true)
	var looks atomic.Int32
	opts := options(cl, cl)
	opts.Settings = operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		looks.Add(1)
		if broken.Load() {
			return nil, &resolver.ConfigError{File: "clusters/local/environments/data/environment.cue", Field: "backups.schedule", Msg: "expected a cron expression"}
		}
		return nil, nil
	})
	logs, log := logtest.New(0)
	s, err := operation.NewScheduler(opts, 5*time.Millisecond, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Start(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitLooks := func(n int32, what string) {
		t.Helper()
		agenttest.WaitUntil(t, 30*time.Second, what, func(context.Context) (bool, string, error) {
			return looks.Load() >= n, fmt.Sprintf("%d looks", looks.Load()), nil
		})
	}
	over := func() int {
		n := 0
		for _, line := range logs.Infos() {
			if strings.Contains(line, "is over") {
				n++
			}
		}
		return n
	}

	waitLooks(5, "five looks at settings in error")
	if errs := logs.Errors(); len(errs) != 1 || !strings.Contains(errs[0], "backups.schedule") {
		t.Fatalf("five looks at settings in error logged %d errors, want one naming the field:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	broken.Store(false)
	at := looks.Load()
	waitLooks(at+3, "three looks at settings mended")
	if n := over(); n != 1 {
		t.Fatalf("the error's end was said %d times, want once:\n%s", n, strings.Join(logs.Infos(), "\n"))
	}
	broken.Store(true)
	at = looks.Load()
	waitLooks(at+3, "three looks at settings in error again")
	if errs := logs.Errors(); len(errs) != 2 {
		t.Errorf("an error back again logged %d errors in all, want a second one:\n%s", len(errs), strings.Join(errs, "\n"))
	}
}

// TestASharedLocationStopsOnlyTheNewScheduledBackupsOfItsEnvironment:
// data backs up where an environment of its name in another cluster does.
// Its scheduled backup is not made (the agents would give the same IDs),
// saying why; its retention goes on, and so does ops' schedule beside it.
// Once its location is its own, the time passed meanwhile is made.
func TestASharedLocationStopsOnlyTheNewScheduledBackupsOfItsEnvironment(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	shared := &resolver.ConfigError{File: "clusters/local/cluster.cue", Line: 4, Field: "backupLocation",
		Msg: `"s3://backups/shared", the backup location of local/data, is also that of eu/data (set in clusters/eu/cluster.cue:4)`}
	for day := 1; day <= 2; day++ {
		newScheduled(ctx, t, cl, "data", time.Date(2026, 12, day, 3, 0, 0, 0, time.UTC), v1alpha1.OperationSucceeded)
	}
	data := resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "s3://backups/shared", Schedule: "0 3 * * *", Keep: 1, LocationErr: shared}
	ops := resolver.EnvironmentBackups{Cluster: "local", Environment: "ops", Location: "pvc://backups/ops", Schedule: "0 3 * * *"}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	settings := []resolver.EnvironmentBackups{data, ops}
	s := scheduler(t, cl, &now, settings...)
	for _, at := range []time.Time{now, time.Date(2026, 12, 3, 3, 0, 30, 0, time.UTC)} {
		now = at
		if err := s.Tick(ctx); err == nil || !strings.Contains(err.Error(), "local/data") || !strings.Contains(err.Error(), shared.File) {
			t.Fatalf("a tick at %s: %v, want an error naming local/data and %s", at, err, shared.File)
		}
	}
	if got := backupNames(ctx, t, cl); !slices.Equal(got, []string{"data-20261202-0300", "ops-20261203-0300"}) {
		t.Fatalf("the backups with data's location shared: %v, want data's newest kept (keep 1) and ops' of 03:00", got)
	}

	settings[0].LocationErr = nil // the scheduler's settings, read at each tick
	now = time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := backupNames(ctx, t, cl); !slices.Contains(got, "data-20261203-0300") {
		t.Fatalf("the backups once data's location is its own: %v, want data's of 03:00 made", got)
	}
}

// TestADeposedSchedulerDoesNotWriteAnOlderTimeOverTheNextLeadersRecord
// pins the record's write on the copy it compared. A leader paused past
// its lease between making 1 December's backup and recording it, while
// the next leader made 2 December's and recorded that, woke and wrote 1
// December over it: the next agent to start after 2 December's backup
// was deleted took that time as missed and made it again, a new backup
// under the deleted one's ID and artefact path.
func TestADeposedSchedulerDoesNotWriteAnOlderTimeOverTheNextLeadersRecord(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	data := resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"}
	paused := &overtaken{Client: cl}
	now := time.Date(2026, 11, 30, 3, 0, 30, 0, time.UTC)
	deposed := recordingScheduler(t, paused, &now, data)
	if err := deposed.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	later := time.Date(2026, 12, 2, 3, 0, 30, 0, time.UTC)
	next := recordingScheduler(t, cl, &later, data)
	paused.arm(func() {
		if err := next.Tick(ctx); err != nil {
			t.Error(err)
		}
	})
	now = time.Date(2026, 12, 1, 3, 0, 30, 0, time.UTC)
	if err := deposed.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := backupNames(ctx, t, cl), []string{"data-20261201-0300", "data-20261202-0300"}; !slices.Equal(got, want) {
		t.Fatalf("backups %v, want %v", got, want)
	}
	if got, want := scheduleRecord(ctx, t, cl), map[string]string{"data": "2026-12-02T03:00:00Z"}; !maps.Equal(got, want) {
		t.Fatalf("recorded %v after the deposed leader's write, want the next leader's %v", got, want)
	}
}

// listOvertaken is a client whose next List of backups is overtaken once
// it has been read: race runs before the list is returned (the scheduler
// paused past its lease between its look at the backups and what it made
// of them).
type listOvertaken struct {
	client.Client
	mu   sync.Mutex
	race func()
}

func (c *listOvertaken) arm(race func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.race = race
}

func (c *listOvertaken) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	err := c.Client.List(ctx, list, opts...)
	if _, ok := list.(*v1alpha1.StyrminBackupList); ok {
		c.mu.Lock()
		race := c.race
		c.race = nil
		c.mu.Unlock()
		if race != nil {
			race()
		}
	}
	return err
}

// TestADeposedSchedulerDoesNotMakeAnOlderTimeTheNextLeaderMadeAndRetentionDeleted
// pins the record's read before a backup is made. A leader paused past
// its lease between its look at 1 December's time and making its backup,
// while the next leader made that night's and the next's, and retention
// (keep 1) deleted 1 December's: it woke and made 1 December's again, an
// extra backup of an older time under the ID and artefact path of one
// deleted. The record names a later time made: nothing is made.
func TestADeposedSchedulerDoesNotMakeAnOlderTimeTheNextLeaderMadeAndRetentionDeleted(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	data := resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *", Keep: 1}
	succeed := func(name string) {
		t.Helper()
		writeStatus(ctx, t, cl, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: name}},
			func(b *v1alpha1.StyrminBackup) { b.Status.Phase = v1alpha1.OperationSucceeded })
	}
	paused := &listOvertaken{Client: cl}
	now := time.Date(2026, 11, 30, 2, 50, 0, 0, time.UTC)
	deposed := recordingScheduler(t, paused, &now, data)
	for _, now = range []time.Time{now, time.Date(2026, 11, 30, 3, 0, 30, 0, time.UTC)} {
		if err := deposed.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	succeed("data-20261130-0300")

	later := time.Date(2026, 12, 1, 3, 0, 40, 0, time.UTC)
	next := recordingScheduler(t, cl, &later, data)
	paused.arm(func() {
		for _, step := range []struct {
			at   time.Time
			made string
		}{
			{time.Date(2026, 12, 1, 3, 0, 40, 0, time.UTC), "data-20261201-0300"},
			{time.Date(2026, 12, 2, 3, 0, 30, 0, time.UTC), "data-20261202-0300"},
			{time.Date(2026, 12, 2, 3, 5, 0, 0, time.UTC), ""},
		} {
			later = step.at
			if err := next.Tick(ctx); err != nil {
				t.Error(err)
			}
			if step.made != "" {
				succeed(step.made)
			}
		}
		now = later // the deposed leader's clock went on while it was paused
	})
	now = time.Date(2026, 12, 1, 3, 0, 30, 0, time.UTC)
	if err := deposed.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := backupNames(ctx, t, cl), []string{"data-20261202-0300"}; !slices.Equal(got, want) {
		t.Fatalf("backups after a deposed leader's look at 1 December woke: %v, want %v (1 December's deleted by retention, not made again)", got, want)
	}
	if got, want := scheduleRecord(ctx, t, cl), map[string]string{"data": "2026-12-02T03:00:00Z"}; !maps.Equal(got, want) {
		t.Fatalf("recorded %v, want the next leader's %v", got, want)
	}
}
