package operation_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// TestAScheduleMakesNoBackupWhileItsPreviousHasNotEnded pins a backup
// that outlasts its schedule's period: the next time made another beside
// it, and another at each time after. None is made while it runs, it says
// so, and the newest time missed is made once it has ended.
func TestAScheduleMakesNoBackupWhileItsPreviousHasNotEnded(t *testing.T) {
	ctx, cl := operations(t)
	prev := newScheduled(ctx, t, cl, "data", time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC), v1alpha1.OperationRunning)
	now := time.Date(2026, 12, 2, 3, 0, 30, 0, time.UTC)
	s := scheduler(t, cl, &now, resolver.EnvironmentBackups{Cluster: "local", Environment: "data", Location: "pvc://backups/data", Schedule: "0 3 * * *"})
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := backupNames(ctx, t, cl); !slices.Equal(got, []string{prev.Name}) {
		t.Fatalf("the schedule's backups while %s runs: %v, want no new one", prev.Name, got)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(prev), prev); err != nil {
		t.Fatal(err)
	}
	if c := apimeta.FindStatusCondition(prev.Status.Conditions, v1alpha1.ConditionReconciling); c == nil || c.Reason != operation.ReasonScheduleWaits ||
		!strings.Contains(c.Message, "2026-12-02T03:00:00Z made no backup") {
		t.Fatalf("the running backup's Reconciling: %+v, want %s saying the time 2026-12-02T03:00:00Z made none", c, operation.ReasonScheduleWaits)
	}

	prev.Status.Phase = v1alpha1.OperationSucceeded
	if err := cl.Status().Update(ctx, prev); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	if err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := backupNames(ctx, t, cl); !slices.Equal(got, []string{prev.Name, "data-20261202-0300"}) {
		t.Fatalf("the schedule's backups once %s ended: %v, want the time missed made", prev.Name, got)
	}
}

// TestBackupsTakenBeforeUpgradesAreKeptToTheNewestFewPerDeployment pins
// retention of the backups upgrades take first: they have no schedule,
// and every upgrade that backs up first left one more that nothing
// deleted. The newest few of each deployment are kept, and one a restore
// reads.
func TestBackupsTakenBeforeUpgradesAreKeptToTheNewestFewPerDeployment(t *testing.T) {
	ctx, cl := operations(t)
	first := func(dep string, seq int) string {
		t.Helper()
		name := "data-" + dep + "-before-" + strconv.Itoa(seq)
		b := &v1alpha1.StyrminBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: name, Labels: map[string]string{
				v1alpha1.LabelCluster: "local", v1alpha1.LabelEnvironment: "data", task.LabelTask: dep + "-" + strconv.Itoa(seq)}},
			Spec: v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "data", Deployments: []string{dep}},
		}
		if err := cl.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		b.Status.Phase = v1alpha1.OperationSucceeded
		if err := cl.Status().Update(ctx, b); err != nil {
			t.Fatal(err)
		}
		return name
	}
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
