package operator_test

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

const (
	// backupSecret is the credentials Secret the data environment names.
	backupSecret = "backup-credentials"
	// backupSecretKey is a fake key: it must reach the job, never a status.
	backupSecretKey = "not-a-real-key-but-a-secret-all-the-same"
)

// dataEnvironment is an environment of two graphhub deployments (a, b)
// whose driver declares backup and restore hooks, with an s3:// backup
// location, its credentials and a daily schedule that keeps 2.
func dataEnvironment() fstest.MapFS {
	hub := []byte("driver: \"graphhub\"\nappVersion: \"1.4.0\"\nparameters: databasePassword: {name: \"db\", key: \"password\"}\n")
	return fstest.MapFS{
		"clusters/local/environments/data/environment.cue": {Data: []byte(`namespacePrefix: "data"
backupLocation:  "s3://backups/local/data"
backups: {secret: "` + backupSecret + `", schedule: "0 3 * * *", keep: 2}
parameters: logLevel: "info"
`), Mode: 0o644},
		"clusters/local/environments/data/deployments/a.cue": {Data: append([]byte("connects: [\"b\"]\n"), hub...), Mode: 0o644},
		"clusters/local/environments/data/deployments/b.cue": {Data: hub, Mode: 0o644},
	}
}

// startDataEnv starts the agent on the example repository with the data
// environment, waits until its deployments run, and makes their
// credentials Secret.
func startDataEnv(t *testing.T) *agentEnv {
	t.Helper()
	e := startAgentEnvWith(t, dataEnvironment())
	e.lock(t)
	e.startAgent(t)
	for _, n := range []string{"a", "b"} {
		requireSucceeded(t, e.waitTask(t, "data-"+n, n, 1))
	}
	e.createBackupSecret(t)
	return e
}

// createBackupSecret makes the data environment's credentials Secret,
// marked for backups.
func (e *agentEnv) createBackupSecret(t *testing.T) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: backupSecret, Namespace: config.AgentNamespace, Labels: map[string]string{task.LabelBackupCredentials: "true"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": backupSecretKey},
	}
	if err := e.c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// waitBackup waits until a StyrminBackup ends.
func (e *agentEnv) waitBackup(t *testing.T, name string) *v1alpha1.StyrminBackup {
	t.Helper()
	var b v1alpha1.StyrminBackup
	agenttest.WaitUntil(t, agentWaitLimit, "backup "+name+" to end", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: config.AgentNamespace, Name: name}, &b); err != nil {
			return false, err.Error(), nil
		}
		return b.Status.Phase.Terminal(), fmt.Sprintf("phase %q %s %+v", b.Status.Phase, b.Status.Message, b.Status.Deployments), nil
	})
	return &b
}

// waitRestore waits until a StyrminRestore reaches phase.
func (e *agentEnv) waitRestore(t *testing.T, name string, phase v1alpha1.OperationPhase) *v1alpha1.StyrminRestore {
	t.Helper()
	var r v1alpha1.StyrminRestore
	agenttest.WaitUntil(t, agentWaitLimit, "restore "+name+" to be "+string(phase), func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: config.AgentNamespace, Name: name}, &r); err != nil {
			return false, err.Error(), nil
		}
		return r.Status.Phase == phase, fmt.Sprintf("phase %q %s retry %q observed %q %+v", r.Status.Phase, r.Status.Message, r.Spec.Retry, r.Status.ObservedRetry, r.Status.Deployments), nil
	})
	return &r
}

func (e *agentEnv) create(t *testing.T, o client.Object) {
	t.Helper()
	if err := e.c.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

func TestBackupOfAnEnvironmentRunsEachDriversHookAsATaskAndARestoreHoldsBackItsDeploymentsFanOut(t *testing.T) {
	t.Parallel()
	e := startAgentEnvWith(t, dataEnvironment())
	e.lock(t)
	e.startAgent(t)
	for _, n := range []string{"a", "b"} {
		requireSucceeded(t, e.waitTask(t, "data-"+n, n, 1))
	}
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", 1))
	ctx := context.Background()
	ns := config.AgentNamespace

	t.Log("refused: a location its Secret cannot reach, and an environment with a driver without the hook")
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "no-secret", Namespace: ns}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}})
	if b := e.waitBackup(t, "no-secret"); b.Status.Phase != v1alpha1.OperationFailed ||
		!strings.Contains(b.Status.Message, "environment local/data") || !strings.Contains(b.Status.Message, `backups.secret "backup-credentials": no such Secret`) {
		t.Fatalf("a backup whose Secret is missing: %s %q, want Failed naming the environment and the Secret", b.Status.Phase, b.Status.Message)
	}
	// A Secret the platform team did not mark for backups, then one
	// without the key an s3:// location needs.
	unmarked := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: backupSecret, Namespace: ns}, StringData: map[string]string{"AWS_ACCESS_KEY_ID": "test"}}
	e.create(t, unmarked)
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "unmarked", Namespace: ns}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}})
	if b := e.waitBackup(t, "unmarked"); b.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(b.Status.Message, "is not labelled styrmin.io/backup-credentials=true") {
		t.Fatalf("a backup whose Secret is not marked for backups: %s %q", b.Status.Phase, b.Status.Message)
	}
	// Marked, but for another environment only: data's files naming it
	// get nothing.
	base := unmarked.DeepCopy()
	unmarked.Labels = map[string]string{task.LabelBackupCredentials: "true"}
	unmarked.Annotations = map[string]string{task.AnnotationBackupEnvironments: "local/prod"}
	if err := e.c.Patch(ctx, unmarked, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "for-prod", Namespace: ns}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}})
	if b := e.waitBackup(t, "for-prod"); b.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(b.Status.Message, `is for environments "local/prod"`) {
		t.Fatalf("a backup whose Secret is for another environment: %s %q", b.Status.Phase, b.Status.Message)
	}
	base = unmarked.DeepCopy()
	unmarked.Annotations = map[string]string{task.AnnotationBackupEnvironments: "local/prod, local/data"}
	if err := e.c.Patch(ctx, unmarked, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "no-key", Namespace: ns}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}})
	if b := e.waitBackup(t, "no-key"); b.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(b.Status.Message, "has no key AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("a backup whose Secret lacks a key: %s %q", b.Status.Phase, b.Status.Message)
	}
	if err := e.c.Delete(ctx, unmarked); err != nil {
		t.Fatal(err)
	}
	e.createBackupSecret(t)
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "dev-web", Namespace: ns}, Spec: v1alpha1.StyrminBackupSpec{Environment: "dev", Deployments: []string{"web"}}})
	if b := e.waitBackup(t, "dev-web"); b.Status.Phase != v1alpha1.OperationFailed ||
		!strings.Contains(b.Status.Message, "environment local/dev, deployment web (driver webapp@1.1.0): its driver declares no backup and restore hooks") {
		t.Fatalf("a backup of web: %s %q, want it refused naming the environment, the deployment and its driver", b.Status.Phase, b.Status.Message)
	}
	t.Log("a whole environment's backup keeps what can be kept and says what it skipped")
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "dev-all", Namespace: ns}, Spec: v1alpha1.StyrminBackupSpec{Environment: "dev"}})
	if b := e.waitBackup(t, "dev-all"); b.Status.Phase != v1alpha1.OperationSucceeded || len(b.Status.Deployments) != 1 || b.Status.Deployments[0].Name != "hub" ||
		!slices.Equal(b.Status.Skipped, []string{"web: driver webapp@1.1.0 declares no backup hook"}) {
		t.Fatalf("a backup of dev: %s %q deployments %+v skipped %q, want hub backed up and web skipped", b.Status.Phase, b.Status.Message, b.Status.Deployments, b.Status.Skipped)
	}
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "web-only", Namespace: ns}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data", Deployments: []string{"web"}}})
	if b := e.waitBackup(t, "web-only"); b.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(b.Status.Message, "deployment web: no such deployment") {
		t.Fatalf("a backup of a deployment of another environment: %s %q", b.Status.Phase, b.Status.Message)
	}
	for _, name := range []string{"no-secret", "unmarked", "no-key", "dev-web", "web-only"} {
		var tasks v1alpha1.StyrminTaskList
		if err := e.c.List(ctx, &tasks, client.MatchingLabels{v1alpha1.LabelOperation: name}); err != nil || len(tasks.Items) > 0 {
			t.Fatalf("refused backup %s made %d tasks (%v): a refusal changes nothing", name, len(tasks.Items), err)
		}
	}

	t.Log("a backup of data, made while a change of a is locked: one task per deployment, ordered with a's change")
	seq := e.change(t, "a", "a logs at debug", map[string][]byte{"clusters/local/environments/data/deployments/a.cue": []byte(
		"connects: [\"b\"]\ndriver: \"graphhub\"\nappVersion: \"1.4.0\"\nparameters: {logLevel: \"debug\", databasePassword: {name: \"db\", key: \"password\"}}\n")})
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "b1", Namespace: ns}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}})
	b1 := e.waitBackup(t, "b1")
	if b1.Status.Phase != v1alpha1.OperationSucceeded || b1.Status.Location != "s3://backups/local/data" || len(b1.Status.Deployments) != 2 {
		t.Fatalf("backup b1: %s %q location %q deployments %+v", b1.Status.Phase, b1.Status.Message, b1.Status.Location, b1.Status.Deployments)
	}
	change := e.waitTask(t, "data-a", "a", seq)
	requireSucceeded(t, change)
	for _, d := range b1.Status.Deployments {
		if want := "s3://backups/local/data/b1/" + d.Name; d.Artifact != want || d.Driver.Name != "graphhub" || d.Driver.Version != "1.0.0" ||
			d.StartedAt == nil || d.FinishedAt == nil || d.Sequence < 1 {
			t.Errorf("b1's %s: %+v, want artefact %s, graphhub@1.0.0, its times and sequence", d.Name, d, want)
		}
		var op v1alpha1.StyrminTask
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: d.Task}, &op); err != nil {
			t.Fatal(err)
		}
		if op.Status.Workflow != v1alpha1.WorkflowBackup || len(op.Status.Steps) == 0 || !strings.HasPrefix(op.Status.Steps[0].Name, "backup/") {
			t.Errorf("b1's task for %s: workflow %s steps %v, want the backup hook's", d.Name, op.Status.Workflow, stepNames(&op))
		}
		if d.Name != "a" {
			continue
		}
		// Ordered: the backup and a's change never overlap, in the order
		// the backup's task says.
		if op.Spec.ToSequence >= seq {
			if op.Status.StartedAt.Before(change.Status.FinishedAt) {
				t.Errorf("the backup (after sequence %d) started %s, before a's change %d ended %s", op.Spec.ToSequence, op.Status.StartedAt, seq, change.Status.FinishedAt)
			}
		} else if change.Status.StartedAt.Before(op.Status.FinishedAt) {
			t.Errorf("a's change %d started %s, before the backup (ordered before it) ended %s", seq, change.Status.StartedAt, op.Status.FinishedAt)
		}
		if d.Sequence != op.Status.FromSequence {
			t.Errorf("b1 records sequence %d for a, its task ran at %d", d.Sequence, op.Status.FromSequence)
		}
	}
	e.requireBackupJob(t, "data-a", "b1", "s3://backups/local/data/b1/a")

	t.Log("a restore that fails at its job holds back a's fan-out task; b's goes on; a retry lets it run")
	// The credentials are fine (a restore whose Secret is not is refused
	// before it starts): the restore runs its pre step, gives its job the
	// credentials, and the job fails. Its pod cannot be scheduled in
	// data-a (pendingPods) and is deleted, which the Job counts a failure.
	release := e.pendingPods(t, "data-a")
	e.create(t, &v1alpha1.StyrminRestore{ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: ns}, Spec: v1alpha1.StyrminRestoreSpec{Backup: "b1", Deployments: []string{"a"}}})
	e.failJobPod(t, "data-a", task.OperationTaskName("a", v1alpha1.OperationRestore, "r1", 1))
	r1 := e.waitRestore(t, "r1", v1alpha1.OperationFailed)
	if !strings.Contains(r1.Status.Message, "restore/core/1:runJob") || !strings.Contains(r1.Status.Message, "BackoffLimitExceeded") ||
		!strings.Contains(r1.Status.Message, "styrminctl restore retry r1") {
		t.Fatalf("r1 failed with %q, want its job's failure and how to retry", r1.Status.Message)
	}
	t.Logf("r1: %s", r1.Status.Message)
	e.requireFailedAtItsJob(t, r1)
	e.commitConfig(t, "data runs one worker", map[string][]byte{"clusters/local/environments/data/environment.cue": []byte(`namespacePrefix: "data"
backupLocation:  "s3://backups/local/data"
backups: {secret: "` + backupSecret + `", schedule: "0 3 * * *", keep: 2}
parameters: {logLevel: "info", workers: 1}
`)})
	fan := e.lock(t)
	if fan["b"] == 0 || fan["a"] != seq+1 {
		t.Fatalf("the fan-out locked %v, want a at %d and b", fan, seq+1)
	}
	requireSucceeded(t, e.waitTask(t, "data-b", "b", fan["b"]))
	held := v1alpha1.TaskName("a", seq+1)
	agenttest.WaitUntil(t, agentWaitLimit, "a's fan-out task to wait for the restore", func(ctx context.Context) (bool, string, error) {
		var tk v1alpha1.StyrminTask
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: "data-a", Name: held}, &tk); err != nil {
			return false, err.Error(), nil
		}
		for _, c := range tk.Status.Conditions {
			if c.Type == v1alpha1.ConditionReady && c.Reason == v1alpha1.ReasonRestoreInProgress {
				return tk.Status.Phase == v1alpha1.TaskPending && len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State == v1alpha1.StepPending, c.Message, nil
			}
		}
		return false, fmt.Sprintf("phase %s %v", tk.Status.Phase, tk.Status.Conditions), nil
	})
	out := e.ctl(t, "status", "--kubeconfig", e.kubeconfig)
	if !strings.Contains(out, "held by a restore:") || !strings.Contains(out, "StyrminRestore r1 failed") {
		t.Errorf("styrminctl status does not show the failed restore holding a:\n%s", out)
	}
	plan := e.ctl(t, "plan", "--base", "HEAD~1", "--head", "HEAD", "--restores", "--kubeconfig", e.kubeconfig)
	if !strings.Contains(plan, "waits for a restore in progress (StyrminRestore r1 failed; it waits to be retried or deleted)") {
		t.Errorf("styrminctl plan --restores does not show a's change waiting for the restore:\n%s", plan)
	}
	// What failed the job is gone before the retry (whose job, and a's
	// components it starts again, make pods in data-a).
	release()
	var r v1alpha1.StyrminRestore
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "r1"}, &r); err != nil {
		t.Fatal(err)
	}
	rbase := r.DeepCopy()
	r.Spec.Retry = "1"
	if err := e.c.Patch(ctx, &r, client.MergeFrom(rbase)); err != nil {
		t.Fatal(err)
	}
	r1 = e.waitRestore(t, "r1", v1alpha1.OperationSucceeded)
	if d := r1.Status.Deployments[0]; d.Attempt != 2 || d.Artifact != "s3://backups/local/data/b1/a" {
		t.Errorf("r1 after its retry: %+v, want attempt 2 restoring b1's artefact of a", d)
	}
	after := e.waitTask(t, "data-a", "a", seq+1)
	requireSucceeded(t, after)
	var rt v1alpha1.StyrminTask
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "data-a", Name: r1.Status.Deployments[0].Task}, &rt); err != nil {
		t.Fatal(err)
	}
	if after.Status.StartedAt.Before(rt.Status.FinishedAt) {
		t.Errorf("a's fan-out started %s, before its restore ended %s", after.Status.StartedAt, rt.Status.FinishedAt)
	}

	t.Log("an upgrade with backupBeforeUpgrade takes a backup before its pre steps and records it")
	up := e.change(t, "a", "a: app 1.4.1, backed up first", map[string][]byte{"clusters/local/environments/data/deployments/a.cue": []byte(
		"connects: [\"b\"]\nbackupBeforeUpgrade: true\ndriver: \"graphhub\"\nappVersion: \"1.4.1\"\nparameters: {logLevel: \"debug\", databasePassword: {name: \"db\", key: \"password\"}}\n")})
	ut := e.waitTask(t, "data-a", "a", up)
	requireSucceeded(t, ut)
	if ut.Status.Workflow != v1alpha1.WorkflowUpgrade || len(ut.Status.Steps) < 2 || ut.Status.Steps[0].Name != "upgrade/pre/1:backup/backup/core/1:runJob" ||
		ut.Status.Steps[1].Name != "upgrade/pre/2:stopComponents" {
		t.Fatalf("the upgrade's steps %v, want the backup hook's job first, then the upgrade's pre steps", stepNames(ut))
	}
	id := task.InlineBackupID(resolver.ID{Cluster: agentCluster, Environment: "data", Name: "a"}, up)
	pre := e.waitBackup(t, id)
	if pre.Status.Phase != v1alpha1.OperationSucceeded || len(pre.Status.Deployments) != 1 ||
		pre.Status.Deployments[0].Artifact != "s3://backups/local/data/"+id+"/a" || pre.Status.Deployments[0].Sequence != seq+1 {
		t.Errorf("the backup before the upgrade: %s %+v, want a's artefact at sequence %d", pre.Status.Phase, pre.Status.Deployments, seq+1)
	}
	e.requireBackupJob(t, "data-a", id, "s3://backups/local/data/"+id+"/a")
	e.requireNoSecretValue(t)
}

// requireBackupJob checks the job a backup ran for a deployment: the
// backup's ID and artefact as environment variables, the credentials from
// a copy of the Secret (never in the job's spec).
func (e *agentEnv) requireBackupJob(t *testing.T, ns, id, artifact string) {
	t.Helper()
	var jobs batchv1.JobList
	if err := e.c.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		c := j.Spec.Template.Spec.Containers[0]
		env := map[string]string{}
		for _, v := range c.Env {
			env[v.Name] = v.Value
		}
		if env[task.EnvBackupID] != id {
			continue
		}
		copied := ""
		for _, f := range c.EnvFrom {
			if f.SecretRef != nil && strings.HasPrefix(f.SecretRef.Name, "styrmin-backup-") {
				copied = f.SecretRef.Name
			}
		}
		if env[task.EnvBackupLocation] != artifact || copied == "" {
			t.Fatalf("backup job %s/%s: env %v envFrom %+v, want the artefact %s and the credentials' copy", ns, j.Name, env, c.EnvFrom, artifact)
		}
		// The job has ended: the copy it was given goes, so no credentials
		// stay in the deployment's namespace with the finished task.
		agenttest.WaitUntil(t, 30*time.Second, "the copy "+ns+"/"+copied+" of the credentials deleted once its job ended", func(ctx context.Context) (bool, string, error) {
			var cp corev1.Secret
			err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: copied}, &cp)
			if apierrors.IsNotFound(err) {
				return true, "", nil
			}
			return false, fmt.Sprintf("still there (%v)", err), client.IgnoreNotFound(err)
		})
		return
	}
	t.Fatalf("no job in %s ran backup %s", ns, id)
}

// requireNoSecretValue checks that no task, backup or restore status
// holds the credentials' value.
func (e *agentEnv) requireNoSecretValue(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var tasks v1alpha1.StyrminTaskList
	var backups v1alpha1.StyrminBackupList
	var restores v1alpha1.StyrminRestoreList
	for _, l := range []client.ObjectList{&tasks, &backups, &restores} {
		if err := e.c.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if s := fmt.Sprintf("%+v %+v %+v", tasks.Items, backups.Items, restores.Items); strings.Contains(s, backupSecretKey) {
		t.Error("a task, backup or restore holds the credentials' value")
	}
	if strings.Contains(e.agent.Log(), backupSecretKey) {
		t.Error("the agent's log holds the credentials' value")
	}
}

func TestScheduledBackupsAreMadeOncePerTimeAndTheOldestBeyondKeepDeleted(t *testing.T) {
	t.Parallel()
	e := startDataEnv(t)
	// The test's own scheduler, on a clock it moves; the agent's runs on
	// the real one and will not reach 03:00 during the test.
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var clone *resolver.EnvironmentBackups // an environment cloned from a backup of data
	settings := operation.SettingsFunc(func(context.Context) ([]resolver.EnvironmentBackups, error) {
		all := []resolver.EnvironmentBackups{{Cluster: agentCluster, Environment: "data", Location: "s3://backups/local/data", Secret: backupSecret, Schedule: "0 3 * * *", Keep: 2}}
		if clone != nil {
			all = append(all, *clone)
		}
		return all, nil
	})
	s, err := operation.NewScheduler(operation.Options{Client: e.c, APIReader: e.c, Drivers: noDrivers{}, Settings: settings,
		Namespace: config.AgentNamespace, Cluster: agentCluster, Now: func() time.Time { return now }}, 0, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tick := func() {
		t.Helper()
		if err := s.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	scheduled := func() []string {
		t.Helper()
		var list v1alpha1.StyrminBackupList
		if err := e.c.List(ctx, &list, client.InNamespace(config.AgentNamespace), client.MatchingLabels{operation.LabelSchedule: "data"}); err != nil {
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
	tick()
	if got := scheduled(); len(got) != 0 {
		t.Fatalf("a new schedule made %v at once, want its first time to wait for 03:00", got)
	}
	var made []string
	for day := 2; day <= 4; day++ {
		now = time.Date(2026, 12, day, 3, 0, 30, 0, time.UTC)
		tick()
		tick() // once per time, however often it looks
		name := fmt.Sprintf("data-202612%02d-0300", day)
		made = append(made, name)
		if b := e.waitBackup(t, name); b.Status.Phase != v1alpha1.OperationSucceeded {
			t.Fatalf("scheduled backup %s: %s %q", name, b.Status.Phase, b.Status.Message)
		}
	}
	// While an environment in git is cloned from the oldest, it stays.
	clone = &resolver.EnvironmentBackups{Cluster: agentCluster, Environment: "preview", Location: "s3://backups/local/preview",
		ClonedFrom: &resolver.CloneSource{Cluster: agentCluster, Environment: "data", Commit: "abcdef1", Backup: made[0], Location: "s3://backups/local/data"}}
	now = now.Add(time.Minute)
	tick()
	tick()
	if got := scheduled(); !slices.Equal(got, made) {
		t.Fatalf("with preview cloned from %s, the backups are %v, want all three %v", made[0], got, made)
	}
	clone = nil
	now = now.Add(time.Minute)
	tick()
	agenttest.WaitUntil(t, agentWaitLimit, "the oldest backup beyond keep 2 to be deleted", func(context.Context) (bool, string, error) {
		got := scheduled()
		return slices.Equal(got, made[1:]), fmt.Sprint(got), nil
	})
	// Its tasks went with it, after the driver's deleteBackup hook deleted
	// each deployment's artefact.
	agenttest.WaitUntil(t, agentWaitLimit, "the deleted backup's tasks to go", func(ctx context.Context) (bool, string, error) {
		var tasks v1alpha1.StyrminTaskList
		err := e.c.List(ctx, &tasks, client.MatchingLabels{v1alpha1.LabelOperation: made[0]})
		return err == nil && len(tasks.Items) == 0, fmt.Sprintf("%d tasks", len(tasks.Items)), err
	})
	for _, n := range []string{"a", "b"} {
		e.requireJobEnv(t, "data-"+n, task.EnvBackupLocation, "s3://backups/local/data/"+made[0]+"/"+n, "delete-backup")
	}
}

// requireJobEnv checks that a job whose name has prefix ran in ns with
// the environment variable key set to value.
func (e *agentEnv) requireJobEnv(t *testing.T, ns, key, value, prefix string) {
	t.Helper()
	var jobs batchv1.JobList
	if err := e.c.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range jobs.Items {
		names = append(names, j.Name)
		if !strings.Contains(j.Name, prefix) {
			continue
		}
		for _, v := range j.Spec.Template.Spec.Containers[0].Env {
			if v.Name == key && v.Value == value {
				return
			}
		}
	}
	t.Fatalf("no %s job in %s with %s=%s (jobs: %v)", prefix, ns, key, value, names)
}

// noDrivers is a driver source the scheduler never asks.
type noDrivers struct{}

func (noDrivers) Driver(context.Context, driversource.Request) (*drivers.Driver, error) {
	return nil, fmt.Errorf("no drivers here")
}

// TestAgentKilledAtEveryStepOfABackupResumesIt SIGKILLs the agent twice
// at every step of a backup's task (once the step is written Running, once
// its action is done), restarting it each time: the backup ends Succeeded,
// each step ran again after each kill, and its job was made once.
func TestAgentKilledAtEveryStepOfABackupResumesIt(t *testing.T) {
	t.Parallel()
	e := startAgentEnvWith(t, dataEnvironment())
	e.lock(t)
	flags := []string{"--debug-step-pause=1s", "--leader-elect=false"}
	agent := e.startAgent(t, flags...)
	requireSucceeded(t, e.waitTask(t, "data-a", "a", 1))
	e.createBackupSecret(t)
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "k1", Namespace: config.AgentNamespace},
		Spec: v1alpha1.StyrminBackupSpec{Environment: "data", Deployments: []string{"a"}}})
	name := task.OperationTaskName("a", v1alpha1.OperationBackup, "k1", 1)
	const steps = 1 // the graphhub backup hook: the dump job
	for k := range steps {
		for _, point := range []string{"step started", "step action done"} {
			agent.WaitLog(t, 2*time.Minute, fmt.Sprintf("%q of step %d of %s", point, k, name), func(l agenttest.LogEntry) bool {
				return l.Str("msg") == point && l.Str("task") == name && l.Num("index") == int64(k)
			})
			agent.Kill(t)
			agent = e.startAgent(t, flags...)
		}
	}
	b := e.waitBackup(t, "k1")
	if b.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("backup k1 after the kills: %s %q", b.Status.Phase, b.Status.Message)
	}
	var tk v1alpha1.StyrminTask
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "data-a", Name: name}, &tk); err != nil {
		t.Fatal(err)
	}
	for _, s := range tk.Status.Steps {
		if s.State != v1alpha1.StepSucceeded || s.Attempts != 3 {
			t.Errorf("step %s: %s after %d attempts; want Succeeded after 3 (two kills)", s.Name, s.State, s.Attempts)
		}
	}
	var jobs batchv1.JobList
	if err := e.c.List(context.Background(), &jobs, client.InNamespace("data-a"), client.MatchingLabels{task.LabelTask: name}); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 1 {
		t.Errorf("the backup made %d jobs, want 1 whatever the kills", len(jobs.Items))
	}
}

// headWorkspace is the workspace of the server's branch head.
func (e *agentEnv) headWorkspace(t *testing.T) *resolver.Workspace {
	t.Helper()
	ctx := context.Background()
	res, err := e.clone.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := e.clone.FS(res.Head)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := resolver.LoadWorkspace(fsys, resolver.WorkspaceOptions{SourceCommit: res.Head.String()})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func TestACloneFromTheLatestBackupRestoresItInSetupConnectsInsideAndIsDeletedWhole(t *testing.T) {
	t.Parallel()
	e := startDataEnv(t)
	ctx := context.Background()
	ns := config.AgentNamespace
	e.create(t, &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: ns}, Spec: v1alpha1.StyrminBackupSpec{Environment: "data"}})
	if b := e.waitBackup(t, "n1"); b.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("backup n1: %s %q", b.Status.Phase, b.Status.Message)
	}
	kc := "--kubeconfig=" + e.kubeconfig
	if out := e.ctl(t, "backup", "create", "local/data", "--name", "n2", "--wait", kc); !strings.Contains(out, "n2 succeeded") ||
		!strings.Contains(out, "s3://backups/local/data/n2/a") || !strings.Contains(out, "graphhub@1.0.0") {
		t.Fatalf("styrminctl backup create --wait:\n%s", out)
	}
	if out := e.ctl(t, "backup", "list", "local/data", kc); !strings.Contains(out, "n1") || !strings.Contains(out, "n2") || !strings.Contains(out, "Succeeded") {
		t.Errorf("styrminctl backup list:\n%s", out)
	}
	if out := e.ctl(t, "backup", "get", "n2", kc); !strings.Contains(out, "s3://backups/local/data/n2/b") {
		t.Errorf("styrminctl backup get n2:\n%s", out)
	}
	latest, err := operation.LatestBackup(ctx, e.c, ns, agentCluster, "data")
	if err != nil || latest.Name != "n2" {
		t.Fatalf("the latest backup of data: %v, %v; want n2", latest, err)
	}

	t.Log("clone data to preview from the latest backup, lock it")
	plan, err := e.headWorkspace(t).PlanClone(resolver.CloneRequest{Cluster: agentCluster, Source: "data", Target: "preview", FromBackup: latest.Name})
	if err != nil {
		t.Fatal(err)
	}
	e.commitConfig(t, plan.Subject(), plan.Files())
	if locked := e.lock(t); locked["a"] != 1 || locked["b"] != 1 {
		t.Fatalf("the clone locked %v, want preview's a and b at 1", locked)
	}
	for _, n := range []string{"a", "b"} {
		tk := e.waitTask(t, "preview-"+n, n, 1)
		requireSucceeded(t, tk)
		var steps []string
		for _, st := range tk.Status.Steps {
			steps = append(steps, st.Name)
		}
		restore := slices.IndexFunc(steps, func(s string) bool { return strings.HasPrefix(s, "setup/post/2:restoreBackup/restore/core/") })
		dbReady := slices.Index(steps, "setup/post/1:waitReady")
		initDB := slices.Index(steps, "setup/post/3:runJob")
		if restore < 0 || dbReady < 0 || initDB < 0 || !(dbReady < restore && restore < initDB) {
			t.Errorf("preview-%s's create: steps %v, want the restore hook after the database is ready and before init", n, steps)
		}
		e.requireRestoreJob(t, "preview-"+n, "s3://backups/local/data/n2/"+n)
		in := e.taskInstance(t, tk)
		cf := in.Context.Environment.ClonedFrom
		if cf == nil || cf.Environment != "data" || cf.Backup != "n2" || in.Context.Environment.BackupLocation != "s3://backups/local/preview" {
			t.Errorf("preview-%s's context: clonedFrom %+v, backupLocation %q", n, cf, in.Context.Environment.BackupLocation)
		}
		if n == "a" {
			urls := fmt.Sprint(in.Context.Services)
			if !strings.Contains(urls, "preview-b") || strings.Contains(urls, "data-") {
				t.Errorf("preview-a connects to %s, want preview's b only", urls)
			}
		}
	}

	t.Log("a deployment added to preview after the clone is not in the backup: it starts empty")
	e.commitConfig(t, "preview: add c", map[string][]byte{"clusters/local/environments/preview/deployments/c.cue": plan.Files()["clusters/local/environments/preview/deployments/b.cue"]})
	if locked := e.lock(t); locked["c"] != 1 || len(locked) != 1 {
		t.Fatalf("adding c locked %v, want preview's c at 1", locked)
	}
	tc := e.waitTask(t, "preview-c", "c", 1)
	requireSucceeded(t, tc)
	skipped := false
	for _, st := range tc.Status.Steps {
		if strings.Contains(st.Name, "restoreBackup") {
			skipped = st.State == v1alpha1.StepSkipped && !strings.Contains(st.Name, "restoreBackup/")
			if !skipped {
				t.Errorf("preview-c's create ran %s (%s): it restores a backup that does not hold it", st.Name, st.State)
			}
		}
	}
	if !skipped {
		t.Errorf("preview-c's create has no skipped restoreBackup step")
	}
	if in := e.taskInstance(t, tc); in.Context.Environment.ClonedFrom != nil {
		t.Errorf("preview-c's context: clonedFrom %+v, want none", in.Context.Environment.ClonedFrom)
	}

	t.Log("restore one deployment of data from the command line")
	if out := e.ctl(t, "restore", "local/data", "--from", "n2", "--deployment", "b", "--name", "rb", "--wait", kc); !strings.Contains(out, "rb succeeded") {
		t.Errorf("styrminctl restore --wait:\n%s", out)
	}
	if b := e.waitRestore(t, "rb", v1alpha1.OperationSucceeded); len(b.Status.Deployments) != 1 || b.Status.Deployments[0].Name != "b" {
		t.Errorf("restore rb: %+v, want b only", b.Status.Deployments)
	}

	t.Log("a restore that fails at its job holds b's change until the StyrminRestore is deleted")
	// As r1 of TestBackupOfAnEnvironmentRunsEachDriversHookAsATaskAndARestoreHoldsBackItsDeploymentsFanOut:
	// the credentials check passes, the job fails.
	release := e.pendingPods(t, "data-b")
	e.create(t, &v1alpha1.StyrminRestore{ObjectMeta: metav1.ObjectMeta{Name: "rd", Namespace: ns}, Spec: v1alpha1.StyrminRestoreSpec{Backup: "n2", Deployments: []string{"b"}}})
	e.failJobPod(t, "data-b", task.OperationTaskName("b", v1alpha1.OperationRestore, "rd", 1))
	rd := e.waitRestore(t, "rd", v1alpha1.OperationFailed)
	if !strings.Contains(rd.Status.Message, "BackoffLimitExceeded") || !strings.Contains(rd.Status.Message, "styrminctl restore retry rd") {
		t.Fatalf("rd failed with %q, want its job's failure and how to retry", rd.Status.Message)
	}
	t.Logf("rd: %s", rd.Status.Message)
	e.requireFailedAtItsJob(t, rd)
	seqB := e.change(t, "b", "b: one worker", map[string][]byte{"clusters/local/environments/data/deployments/b.cue": []byte(
		"driver: \"graphhub\"\nappVersion: \"1.4.0\"\nparameters: {workers: 1, databasePassword: {name: \"db\", key: \"password\"}}\n")})
	heldB := v1alpha1.TaskName("b", seqB)
	agenttest.WaitUntil(t, agentWaitLimit, "b's change to wait for the failed restore", func(ctx context.Context) (bool, string, error) {
		var tk v1alpha1.StyrminTask
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: "data-b", Name: heldB}, &tk); err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(tk.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonRestoreInProgress && tk.Status.Phase == v1alpha1.TaskPending, fmt.Sprintf("%s %v", tk.Status.Phase, c), nil
	})
	// b's change starts b's components again: their pods must schedule.
	release()
	if err := e.c.Delete(ctx, &v1alpha1.StyrminRestore{ObjectMeta: metav1.ObjectMeta{Name: "rd", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	requireSucceeded(t, e.waitTask(t, "data-b", "b", seqB))

	t.Log("delete preview: its deployments are tombstoned and uninstalled")
	del, err := e.headWorkspace(t).PlanEnvironmentDelete(resolver.EnvironmentDeleteRequest{Cluster: agentCluster, Environment: "preview"})
	if err != nil {
		t.Fatal(err)
	}
	e.commitConfig(t, del.Subject(), del.Files())
	_, err = e.clone.CommitLocks(ctx, gitsource.CommitRequest{Build: func(_ context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
		ws, err := resolver.LoadWorkspace(headFS, resolver.WorkspaceOptions{SourceCommit: head.String()})
		if err != nil {
			return gitsource.Change{}, err
		}
		if _, _, err := ws.Lock(resolver.LockAllOrNothing); err == nil || !strings.Contains(err.Error(), "--allow-deletions 3") {
			return gitsource.Change{}, fmt.Errorf("a lock deleting preview's three deployments: %v, want the deletion guard asking for --allow-deletions 3", err)
		}
		changes, _, err := ws.LockAllowing(resolver.LockAllOrNothing, 3)
		if err != nil {
			return gitsource.Change{}, err
		}
		ch := gitsource.Change{Files: map[string][]byte{}, Locks: map[string]int{}}
		for _, c := range changes {
			ch.Files[c.Path()] = c.Data
			ch.Locks[c.ID.String()] = int(c.Next.Sequence)
		}
		return ch, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		requireSucceeded(t, e.waitTask(t, "preview-"+n, n, 2))
		agenttest.WaitUntil(t, agentWaitLimit, "preview-"+n+"'s StyrminDeployment to go", func(ctx context.Context) (bool, string, error) {
			return e.deployment(t, "preview-"+n) == nil, "still there", nil
		})
	}
}

// requireRestoreJob checks the job a clone's restore ran: the artefact it
// restores and the credentials' copy.
func (e *agentEnv) requireRestoreJob(t *testing.T, ns, artifact string) {
	t.Helper()
	var jobs batchv1.JobList
	if err := e.c.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		c := j.Spec.Template.Spec.Containers[0]
		for _, v := range c.Env {
			if v.Name == task.EnvRestoreFrom && v.Value == artifact {
				return
			}
		}
	}
	t.Fatalf("no job in %s restored %s", ns, artifact)
}

// pendingPods keeps every pod created in ns from now on Pending: a
// LimitRange gives its containers a default CPU request no node can hold
// (the fake nodes have 32 CPUs). The pods already there are untouched.
// It returns what removes the LimitRange. Both wait until the API
// server's admission (LimitRanger, which reads LimitRanges from a cache)
// applies it, or no longer does, told by a dry-run pod: a pod admitted a
// moment too early or too late would run, or never would.
func (e *agentEnv) pendingPods(t *testing.T, ns string) (release func()) {
	t.Helper()
	ctx := context.Background()
	lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "no-node-fits", Namespace: ns}, Spec: corev1.LimitRangeSpec{
		Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer, DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000")}}}}}
	if err := e.c.Create(ctx, lr); err != nil {
		t.Fatal(err)
	}
	e.waitLimitRange(t, ns, true)
	return func() {
		t.Helper()
		if err := e.c.Delete(ctx, lr); err != nil {
			t.Fatal(err)
		}
		e.waitLimitRange(t, ns, false)
	}
}

// waitLimitRange waits until a pod created in ns gets pendingPods' CPU
// request (applied) or none (not), trying a dry run.
func (e *agentEnv) waitLimitRange(t *testing.T, ns string, applied bool) {
	t.Helper()
	agenttest.WaitUntil(t, 30*time.Second, fmt.Sprintf("the LimitRange of %s applied: %t", ns, applied), func(ctx context.Context) (bool, string, error) {
		probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "limit-probe-", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "example.com/probe"}}}}
		if err := e.c.Create(ctx, probe, client.DryRunAll); err != nil {
			return false, err.Error(), nil
		}
		_, got := probe.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
		return got == applied, fmt.Sprintf("requests %v", probe.Spec.Containers[0].Resources.Requests), nil
	})
}

// failJobPod fails the job of task taskName in ns, its pod held Pending
// by pendingPods: once the scheduler has found no node for the pod, it
// deletes it. A Job counts a pod deleted before it succeeded as failed,
// and an operation's Job (backoffLimit 0) fails: BackoffLimitExceeded.
func (e *agentEnv) failJobPod(t *testing.T, ns, taskName string) {
	t.Helper()
	ctx := context.Background()
	var pod corev1.Pod
	agenttest.WaitUntil(t, agentWaitLimit, "the pod of "+taskName+"'s job to be unschedulable", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := e.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{task.LabelTask: taskName}); err != nil {
			return false, err.Error(), nil
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodPending {
				return false, "", fmt.Errorf("the pod %s of %s's job is %s, want it Pending (no node fits it)", p.Name, taskName, p.Status.Phase)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					pod = p
					return true, "", nil
				}
			}
		}
		return false, fmt.Sprintf("%d pod(s)", len(pods.Items)), nil
	})
	if err := e.c.Delete(ctx, &pod); err != nil {
		t.Fatal(err)
	}
}

// requireFailedAtItsJob checks that a failed restore's first deployment
// failed at its job, after its pre step stopped the deployment's
// components.
func (e *agentEnv) requireFailedAtItsJob(t *testing.T, rs *v1alpha1.StyrminRestore) {
	t.Helper()
	d := rs.Status.Deployments[0]
	var tk v1alpha1.StyrminTask
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: d.Namespace, Name: d.Task}, &tk); err != nil {
		t.Fatal(err)
	}
	states := map[string]v1alpha1.StepState{}
	for _, st := range tk.Status.Steps {
		states[st.Name] = st.State
	}
	if states["restore/pre/1:stopComponents"] != v1alpha1.StepSucceeded || states["restore/core/1:runJob"] != v1alpha1.StepFailed {
		t.Errorf("restore %s's task %s: steps %v, want its pre step done and its job failed", rs.Name, tk.Name, stepNames(&tk))
	}
}
