package task

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// credentialsKey is the secret value of the backup credentials in these
// tests: it must not outlive the Job given it, nor reach the status.
const credentialsKey = "the-secret-access-key-of-the-store"

// credentialsTask makes the reconciler of a control plane whose agent
// namespace holds the environment's backup credentials, and a task of the
// jobs driver in ns planned with one backup step (a backup before an
// upgrade, say) whose runJob a driver retries attempts times. It returns
// the task's request after its first reconcile, which made the step's Job.
func credentialsTask(t *testing.T, ns string, attempts int) (client.Client, *Reconciler, reconcile.Request) {
	t.Helper()
	const agent = "styrmin-system"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agent}}); err != nil {
		t.Fatal(err)
	}
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "backup-keys", Namespace: agent, Labels: map[string]string{LabelBackupCredentials: "true"}},
		StringData: map[string]string{"AWS_SECRET_ACCESS_KEY": credentialsKey}}
	if err := cl.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	settings := func(context.Context, string, string) (resolver.EnvironmentBackups, error) {
		return resolver.EnvironmentBackups{Cluster: "local", Environment: "dev", Location: "s3://backups/local/dev", Secret: "backup-keys"}, nil
	}
	d := jobsDriver(t, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]}]`)
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), AgentNamespace: agent,
		BackupSettings: settings, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	st := taskStepOf("create/pre/1:backup/backup/core/1:runJob", "create", "pre", drivers.Step{Action: drivers.ActionRunJob, Component: "app", Job: "dump",
		Command: []string{"dump"}, Retry: drivers.RetryPolicy{Attempts: attempts, Backoff: time.Millisecond}})
	st.Args[argOperation], st.Args[argBackupID], st.Args[argArtifact] = "backup", "b1", "s3://backups/local/dev/b1/jobs"
	// Running already: a task that starts plans its steps again.
	now := metav1.Now()
	tk.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, StartedAt: &now, Workflow: v1alpha1.WorkflowCreate, Steps: []v1alpha1.TaskStep{st}}
	if err := cl.Status().Update(ctx, tk); err != nil {
		t.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	reconcileUntil(t, r, cl, req, "the backup step's Job made", func(*v1alpha1.StyrminTask) bool { return credentialsJob(t, cl, ns) != nil })
	return cl, r, req
}

// credentialsJob is the backup step's Job in ns (nil: none, or one being
// deleted).
func credentialsJob(t *testing.T, cl client.Client, ns string) *batchv1.Job {
	t.Helper()
	var jobs batchv1.JobList
	if err := cl.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range jobs.Items {
		if j := &jobs.Items[i]; strings.Contains(j.Name, "dump") && j.DeletionTimestamp.IsZero() {
			return j
		}
	}
	return nil
}

// credentialsCopiesIn are the names of the copies of backup credentials
// in ns.
func credentialsCopiesIn(t *testing.T, cl client.Client, ns string) []string {
	t.Helper()
	var secrets corev1.SecretList
	if err := cl.List(context.Background(), &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range secrets.Items {
		if strings.HasPrefix(s.Name, credentialsCopyPrefix) {
			out = append(out, s.Name)
		}
	}
	return out
}

// wantGivenItsCopy checks that job was given a copy of the credentials,
// which is there.
func wantGivenItsCopy(t *testing.T, cl client.Client, job *batchv1.Job) {
	t.Helper()
	env := job.Spec.Template.Spec.Containers[0].EnvFrom
	copies := credentialsCopiesIn(t, cl, job.Namespace)
	if len(env) != 1 || env[0].SecretRef == nil || len(copies) != 1 || copies[0] != env[0].SecretRef.Name {
		t.Fatalf("job %s given %+v, copies %v; want it given the one copy of the credentials", job.Name, env, copies)
	}
}

// completeJob writes job's status as the Job controller does once its
// pod succeeded.
func completeJob(t *testing.T, cl client.Client, job *batchv1.Job) {
	t.Helper()
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}}
	if err := cl.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
}

// TestTheCopyOfTheBackupCredentialsIsDeletedOnceItsJobEnded pins how long
// the copy of the backup credentials a backup's Job is given lives in the
// deployment's namespace: until the step's end is written. It was owned by
// the task and lived as long (an operation's as long as its
// StyrminBackup): it outlived a rotation or withdrawal of the Secret in
// the agent's namespace, readable to whoever reads the namespace's
// Secrets. A copy an agent stopped before deleting (or an older agent
// kept) goes when the ended task is reconciled again.
func TestTheCopyOfTheBackupCredentialsIsDeletedOnceItsJobEnded(t *testing.T) {
	t.Parallel()
	const ns = "dev-credcopy"
	cl, r, req := credentialsTask(t, ns, 1)
	job := credentialsJob(t, cl, ns)
	wantGivenItsCopy(t, cl, job)
	completeJob(t, cl, job)
	tk := reconcileUntil(t, r, cl, req, "the task succeeded", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() })
	if tk.Status.Phase != v1alpha1.TaskSucceeded {
		t.Fatalf("task %s %q; want it succeeded", tk.Status.Phase, tk.Status.Message)
	}
	if copies := credentialsCopiesIn(t, cl, ns); len(copies) > 0 {
		t.Fatalf("copies %v of the backup credentials kept after the job completed and the task ended", copies)
	}

	// Stopped between the task's end and the deletion: the next
	// reconcile of the ended task deletes it.
	left := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: env0(job), Namespace: ns, Labels: map[string]string{LabelTask: tk.Name},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "StyrminTask", Name: tk.Name, UID: tk.UID}}},
		StringData: map[string]string{"AWS_SECRET_ACCESS_KEY": credentialsKey}}
	if err := cl.Create(context.Background(), left); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if copies := credentialsCopiesIn(t, cl, ns); len(copies) > 0 {
		t.Fatalf("copies %v of the backup credentials kept by an ended task reconciled again", copies)
	}
}

// env0 is the Secret job's container is given.
func env0(job *batchv1.Job) string {
	return job.Spec.Template.Spec.Containers[0].EnvFrom[0].SecretRef.Name
}

// TestTheCopyOfTheBackupCredentialsIsDeletedAfterAFailedJobAndMadeAgainForTheRetry
// pins the copy's life across a failed run its driver retries: deleted
// once the failure is written, made again for the next run's Job, and
// deleted when the last run failed the task. Nothing of the credentials
// reaches the task's status.
func TestTheCopyOfTheBackupCredentialsIsDeletedAfterAFailedJobAndMadeAgainForTheRetry(t *testing.T) {
	t.Parallel()
	const ns = "dev-credcopy-failed"
	cl, r, req := credentialsTask(t, ns, 2)
	first := credentialsJob(t, cl, ns)
	wantGivenItsCopy(t, cl, first)
	failJobAtItsBackoffLimit(t, cl, first, 1)

	// The failure written, the copy goes; the retry's Job gets it again.
	reconcileUntil(t, r, cl, req, "the step failed once", func(tk *v1alpha1.StyrminTask) bool {
		return tk.Status.Steps[0].State == v1alpha1.StepPending && tk.Status.Steps[0].FinishedAt != nil
	})
	if copies := credentialsCopiesIn(t, cl, ns); len(copies) > 0 {
		t.Fatalf("copies %v of the backup credentials kept after the job failed", copies)
	}
	reconcileUntil(t, r, cl, req, "the retry's Job made", func(*v1alpha1.StyrminTask) bool {
		j := credentialsJob(t, cl, ns)
		return j != nil && j.UID != first.UID
	})
	second := credentialsJob(t, cl, ns)
	wantGivenItsCopy(t, cl, second)

	failJobAtItsBackoffLimit(t, cl, second, 1)
	tk := reconcileUntil(t, r, cl, req, "the task failed", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() })
	if tk.Status.Phase != v1alpha1.TaskFailed {
		t.Fatalf("task %s %q; want it failed", tk.Status.Phase, tk.Status.Message)
	}
	if copies := credentialsCopiesIn(t, cl, ns); len(copies) > 0 {
		t.Fatalf("copies %v of the backup credentials kept after the task failed", copies)
	}
	if st := tk.Status.Steps[0]; strings.Contains(tk.Status.Message+st.Message+st.Output, credentialsKey) {
		t.Errorf("the task's status holds the credentials: %q %q %q", tk.Status.Message, st.Message, st.Output)
	}
}
