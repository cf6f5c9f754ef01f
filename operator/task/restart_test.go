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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestARestartedAgentAdoptsItsJobAndKeepsARetrysBackOff pins what an
// agent restart (a new task controller, nothing in memory) changes of a
// retried runJob step, on a real API server: the Job the stopped agent
// made is the step's run still (adopted, not made twice: it is named
// after the deployment, the job and the sequence, its UID recorded), the
// resume counted as a start and a resume, but as no run of the
// driver's retries; a failed run's back-off is
// read from the step's written end, so a restart during it starts no run
// early; once it is over, the next attempt makes a Job of its own.
func TestARestartedAgentAdoptsItsJobAndKeepsARetrysBackOff(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTask(t, ns, `attempts: 3, backoff: "10m"`)
	ctx := context.Background()
	jobKey := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}
	jobUID := func() types.UID {
		t.Helper()
		var job batchv1.Job
		if err := cl.Get(ctx, jobKey, &job); err != nil {
			t.Fatalf("the runJob step's Job: %v", err)
		}
		return job.UID
	}
	reconcileUntil(t, agent(), cl, req, "the step's Job made and recorded", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].Recorded[recordJob] != ""
	})
	made := jobUID()

	// The agent restarts while the Job runs: the next one adopts it.
	restarted := agent()
	if _, err := restarted.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	st := getTask(t, cl, req.NamespacedName).Status.Steps[0]
	if got := jobUID(); got != made || st.State != v1alpha1.StepRunning || st.Resumes != 1 || st.Attempts != 2 || st.Recorded[recordJob] != string(made) {
		t.Fatalf("after a restart: Job %s (made %s), step %s, attempt %d, resumed %d, recorded %q; want the same Job, running, resumed once",
			got, made, st.State, st.Attempts, st.Resumes, st.Recorded[recordJob])
	}

	// The Job fails: the step waits its back-off, written with its end.
	var job batchv1.Job
	if err := cl.Get(ctx, jobKey, &job); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now, Failed: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
	}}
	if err := cl.Status().Update(ctx, &job); err != nil {
		t.Fatal(err)
	}
	reconcileUntil(t, restarted, cl, req, "the failed run written with its back-off", func(tk *v1alpha1.StyrminTask) bool {
		return tk.Status.Steps[0].State == v1alpha1.StepPending
	})
	st = getTask(t, cl, req.NamespacedName).Status.Steps[0]
	if !strings.Contains(st.Message, "attempt 1 of 3 failed") || st.FinishedAt == nil {
		t.Fatalf("step %q, ended %v; want attempt 1 of 3 failed, its end written", st.Message, st.FinishedAt)
	}

	// Restarted within the back-off: no run starts early.
	res, err := agent().Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	st = getTask(t, cl, req.NamespacedName).Status.Steps[0]
	if st.State != v1alpha1.StepPending || st.Attempts != 2 || jobUID() != made || res.RequeueAfter < 9*time.Minute {
		t.Fatalf("a restart within the back-off: step %s attempt %d, Job %s (failed one %s), requeued after %s; want it waiting the back-off out, nearly its 10 minutes",
			st.State, st.Attempts, jobUID(), made, res.RequeueAfter)
	}

	// The back-off over (its end 11 minutes ago), a restarted agent runs the
	// second attempt with a Job of its own (the step's third start).
	tk := getTask(t, cl, req.NamespacedName)
	base := tk.DeepCopy()
	tk.Status.Steps[0].FinishedAt = &metav1.Time{Time: time.Now().Add(-11 * time.Minute)}
	if err := cl.Status().Patch(ctx, tk, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	reconcileUntil(t, agent(), cl, req, "the last attempt's Job", func(tk *v1alpha1.StyrminTask) bool {
		rec := tk.Status.Steps[0].Recorded[recordJob]
		return rec != "" && rec != string(made)
	})
	st = getTask(t, cl, req.NamespacedName).Status.Steps[0]
	if st.State != v1alpha1.StepRunning || st.Attempts != 3 || jobUID() == made {
		t.Fatalf("after the back-off: step %s attempt %d, Job %s; want its third start running a new Job", st.State, st.Attempts, jobUID())
	}
}

// TestAgentRestartsWhileARunJobStepsJobRunsUseNoneOfItsRetries pins that
// a runJob step's retries count the Jobs it ran, not the agent restarts
// it waited through: a restart resumes the step on the Job the stopped
// agent made (it runs nothing again), yet it counted as an attempt of
// the driver's retry policy, so a migration whose agent restarted once
// (a rolling upgrade of the agent, a node drained) ended Failed at its
// first transient failure, its components left stopped for a person,
// where it would have run again. The restarts stay bounded by the
// agent's resumes (MaxStepResumes); the message counts runs.
func TestAgentRestartsWhileARunJobStepsJobRunsUseNoneOfItsRetries(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTask(t, ns, `attempts: 2, backoff: "1s"`)
	ctx := context.Background()
	reconcileUntil(t, agent(), cl, req, "the step's Job made and recorded", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].Recorded[recordJob] != ""
	})
	// Two restarts while the Job runs, then it fails.
	if _, err := agent().Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	last := agent()
	if _, err := last.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	jobKey := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}
	var job batchv1.Job
	if err := cl.Get(ctx, jobKey, &job); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now, Failed: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
	}}
	if err := cl.Status().Update(ctx, &job); err != nil {
		t.Fatal(err)
	}
	tk := reconcileUntil(t, last, cl, req, "the failed Job's step decided", func(tk *v1alpha1.StyrminTask) bool {
		return tk.Status.Phase.Terminal() || tk.Status.Steps[0].State == v1alpha1.StepPending
	})
	st := tk.Status.Steps[0]
	if tk.Status.Phase.Terminal() || st.State != v1alpha1.StepPending || st.Resumes != 2 || !strings.Contains(st.Message, "attempt 1 of 2 failed") {
		t.Fatalf("task %s, step %s (attempts %d, resumed %d) %q; want the step to run its Job again: one run of two failed, the restarts none",
			tk.Status.Phase, st.State, st.Attempts, st.Resumes, st.Message)
	}
}

// migrationTask is a control plane with namespace ns and the task of
// change 1 of a driver whose setup runs a migration Job with the given
// retry policy ("": none); agent makes a new task controller (an agent started
// again, nothing in memory).
func migrationTask(t *testing.T, ns, retry string) (cl client.Client, agent func() *Reconciler, req reconcile.Request) {
	t.Helper()
	return migrationTaskWith(t, ns, retry, Options{})
}

// migrationTaskWith is migrationTask whose agents take opts (its client,
// drivers and registry set here).
func migrationTaskWith(t *testing.T, ns, retry string, opts Options) (cl client.Client, agent func() *Reconciler, req reconcile.Request) {
	t.Helper()
	if retry != "" {
		retry = `, retry: {` + retry + `}`
	}
	return jobsTaskWith(t, ns, `setup: pre: [{action: "runJob", component: "app", job: "migrate", command: ["migrate"]`+retry+`}]`, opts)
}

// jobsTaskWith is a control plane with namespace ns and the task of
// change 1 of a driver of the given actions, whose agents take opts.
func jobsTaskWith(t *testing.T, ns, actions string, opts Options) (cl client.Client, agent func() *Reconciler, req reconcile.Request) {
	t.Helper()
	cl = withCRDs(t, ns)
	d := jobsDriver(t, actions)
	agent = func() *Reconciler {
		o := opts
		o.Client, o.Drivers, o.Registerer = cl, oneDriver{d}, prometheus.NewRegistry()
		r, err := NewReconciler(o)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	return cl, agent, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
}

// TestARunJobStepPastItsResumesTakesUpItsRunningJobRatherThanKillIt pins
// what an agent that restarts more often than it resumes a step (one
// crash-looping for hours) does to a runJob step whose Job runs: it takes
// the Job up, as every resume before did, and waits for its end. It failed
// the step as interrupted and deleted the Job, killing a migration midway
// though the Job runs in the cluster whatever the agent does. The wait
// stays bounded by the Job's own deadline (the step's timeout, counted
// from the Job's start).
func TestARunJobStepPastItsResumesTakesUpItsRunningJobRatherThanKillIt(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTaskWith(t, ns, `attempts: 2, backoff: "1s"`, Options{MaxStepResumes: 1})
	ctx := context.Background()
	jobKey := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}
	reconcileUntil(t, agent(), cl, req, "the step's Job made and recorded", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].Recorded[recordJob] != ""
	})
	var job batchv1.Job
	if err := cl.Get(ctx, jobKey, &job); err != nil {
		t.Fatal(err)
	}
	made := job.UID
	for restart := 1; restart <= 3; restart++ {
		if _, err := agent().Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		tk := getTask(t, cl, req.NamespacedName)
		st := tk.Status.Steps[0]
		if err := cl.Get(ctx, jobKey, &job); err != nil || job.UID != made || !job.DeletionTimestamp.IsZero() {
			t.Fatalf("restart %d (the agent resumes a step once): job %s, deleted %v, err %v; want the Job made (%s) running on", restart, job.UID, job.DeletionTimestamp, err, made)
		}
		if tk.Status.Phase != v1alpha1.TaskRunning || st.State != v1alpha1.StepRunning || st.Resumes != int32(restart) {
			t.Fatalf("restart %d: task %s %q, step %s %q resumed %d times; want it Running, waiting for its Job", restart, tk.Status.Phase, tk.Status.Message, st.State, st.Message, st.Resumes)
		}
	}
	completeJob(t, cl, &job)
	tk := reconcileUntil(t, agent(), cl, req, "the Job's end", func(tk *v1alpha1.StyrminTask) bool {
		return tk.Status.Steps[0].State.Terminal()
	})
	if st := tk.Status.Steps[0]; st.State != v1alpha1.StepSucceeded || !strings.Contains(st.Output, "completed") {
		t.Fatalf("step %s %q output %q; want it succeeded with its Job", st.State, st.Message, st.Output)
	}
}

// TestARunJobStepPastItsResumesTakesUpItsEndedJobOnceNotAtEveryRestart
// pins that a resume past MaxStepResumes takes up the step's Job that
// ended once only. An agent that dies while it reads the Job's end (its
// logs, its pods) took the Job up at every restart: the bound never
// tripped and the agent crash-looped until someone deleted the Job. The
// next restart fails the step as interrupted, as for any other step.
func TestARunJobStepPastItsResumesTakesUpItsEndedJobOnceNotAtEveryRestart(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTaskWith(t, ns, "", Options{MaxStepResumes: 1})
	ctx := context.Background()
	reconcileUntil(t, agent(), cl, req, "the step's Job made and recorded", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].Recorded[recordJob] != ""
	})
	if _, err := agent().Reconcile(ctx, req); err != nil { // the one resume
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}, &job); err != nil {
		t.Fatal(err)
	}
	completeJob(t, cl, &job)
	for restart := 1; restart <= 3; restart++ {
		r := agent()
		r.opts.StepPause = time.Minute // killed before it writes the step's end
		killedOnceResumed(t, r, cl, req)
		if getTask(t, cl, req.NamespacedName).Status.Phase.Terminal() {
			break
		}
	}
	tk := getTask(t, cl, req.NamespacedName)
	st := tk.Status.Steps[0]
	if tk.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(tk.Status.Message, "("+v1alpha1.ReasonStepInterrupted+")") || st.Resumes != 2 {
		t.Fatalf("after three agents died reading the ended Job's end: task %s %q, step %s %q resumed %d times; want it failed as interrupted after one take-up past the bound (resumed twice)",
			tk.Status.Phase, tk.Status.Message, st.State, st.Message, st.Resumes)
	}
}

// TestARunJobStepPastItsResumesKeepsItsEndedJobAndSaysHowItEnded pins
// what the step failed as interrupted past MaxStepResumes leaves of its
// Job, which ended and whose end an agent crash-looping while it read it
// had taken up once: the Job stays, with its pods and logs, and the
// step's message says how it ended. The Job was deleted with the step's
// failure, so a migration that completed read as a step interrupted and
// not run again, and the only record that it ran went with its Job.
func TestARunJobStepPastItsResumesKeepsItsEndedJobAndSaysHowItEnded(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTaskWith(t, ns, "", Options{MaxStepResumes: 1})
	ctx := context.Background()
	reconcileUntil(t, agent(), cl, req, "the step's Job made and recorded", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].Recorded[recordJob] != ""
	})
	if _, err := agent().Reconcile(ctx, req); err != nil { // the one resume
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}
	var job batchv1.Job
	if err := cl.Get(ctx, key, &job); err != nil {
		t.Fatal(err)
	}
	completeJob(t, cl, &job)
	for range 3 {
		r := agent()
		r.opts.StepPause = time.Minute // killed before it writes the step's end
		killedOnceResumed(t, r, cl, req)
		if getTask(t, cl, req.NamespacedName).Status.Phase.Terminal() {
			break
		}
	}
	tk := getTask(t, cl, req.NamespacedName)
	st := tk.Status.Steps[0]
	if tk.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(st.Message, "job "+key.String()+" completed") {
		t.Fatalf("task %s %q, step %s %q; want it failed as interrupted, saying its job %s completed", tk.Status.Phase, tk.Status.Message, st.State, st.Message, key)
	}
	var kept batchv1.Job
	if err := cl.Get(ctx, key, &kept); err != nil || kept.UID != job.UID || !kept.DeletionTimestamp.IsZero() {
		t.Fatalf("the step's ended Job: %v, UID %s (was %s), deleted %v; want it kept with its pods and logs", err, kept.UID, job.UID, kept.DeletionTimestamp)
	}
}

// killedOnceResumed runs r on req until the API server shows the task's
// first step resumed once more (or the task ended), then stops it, as an
// agent killed right after its resume was written.
func killedOnceResumed(t *testing.T, r *Reconciler, cl client.Client, req reconcile.Request) {
	t.Helper()
	was := getTask(t, cl, req.NamespacedName).Status.Steps[0].Resumes
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = r.Reconcile(ctx, req)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Minute)
	for {
		tk := getTask(t, cl, req.NamespacedName)
		if tk.Status.Phase.Terminal() || tk.Status.Steps[0].Resumes != was {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent neither resumed the step nor ended the task in a minute: task %s %q", tk.Status.Phase, tk.Status.Message)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestARunJobStepPastItsResumesDoesNotTakeUpTheJobAnotherDeploymentLeft
// pins that a resume past MaxStepResumes takes up only a Job its
// deployment's step made. With no Job recorded it took any Job at the
// step's name whose task label was the task's name: a deployment deleted
// from the namespace before (an environment renamed from qa to dev, its
// namespacePrefix kept) left jobs-migrate-1 of its task jobs-1, and dev's
// step, waiting for it, was taken on past the bound and ran its own
// migration for the first time there. It fails as interrupted, leaving
// qa's Job alone.
func TestARunJobStepPastItsResumesDoesNotTakeUpTheJobAnotherDeploymentLeft(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTaskWith(t, ns, "", Options{MaxStepResumes: 1})
	ctx := context.Background()
	qa, key := qasJob(t, cl, ns)
	// Dev's step waits for qa's Job, which runs; the agent restarts twice.
	for range 3 {
		if _, err := agent().Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	tk := getTask(t, cl, req.NamespacedName)
	st := tk.Status.Steps[0]
	if tk.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(tk.Status.Message, "("+v1alpha1.ReasonStepInterrupted+")") {
		t.Fatalf("past the bound: task %s %q, step %s %q resumed %d times; want it failed as interrupted, qa's Job not taken for dev's run",
			tk.Status.Phase, tk.Status.Message, st.State, st.Message, st.Resumes)
	}
	var job batchv1.Job
	if err := cl.Get(ctx, key, &job); err != nil || job.UID != qa.UID || !job.DeletionTimestamp.IsZero() {
		t.Fatalf("qa's Job: %v, UID %s (was %s), deleted %v; want it left alone", err, job.UID, qa.UID, job.DeletionTimestamp)
	}
}
