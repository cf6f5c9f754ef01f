package task

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAFailedTaskThatHoldsComponentsStoppedIsNotPruned: a failed upgrade
// that stopped the workers before its migration failed holds them
// stopped (no drift correction starts them on half-migrated data). Later
// changes that end before their own stop step (superseded, failed in
// their checks) pruned it past the kept history, and its hold went with
// it. It is kept while it holds; the others beyond the history go.
func TestAFailedTaskThatHoldsComponentsStoppedIsNotPruned(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	d := maintenanceDriver(t)
	ctx := context.Background()
	end := func(tk *v1alpha1.StyrminTask, phase v1alpha1.TaskPhase, steps ...v1alpha1.TaskStep) {
		t.Helper()
		tk.Status.Phase, tk.Status.Steps = phase, steps
		if len(steps) > 0 {
			tk.Status.StartedAt = steps[0].StartedAt
		}
		if err := cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	started := metav1.Now()
	holder := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowUpgrade)
	end(holder, v1alpha1.TaskFailed,
		v1alpha1.TaskStep{Name: "upgrade/pre/1:stopComponents", Hook: "upgrade", Mode: "pre", Action: "stopComponents", Components: []string{"app"}, State: v1alpha1.StepSucceeded, StartedAt: &started},
		v1alpha1.TaskStep{Name: "upgrade/pre/2:runJob", Hook: "upgrade", Mode: "pre", Action: "runJob", State: v1alpha1.StepFailed, StartedAt: &started})
	superseded := createJobsTask(t, cl, jobsInstance(t, d, ns, 2, "1.0.0"), v1alpha1.WorkflowUpdate)
	end(superseded, v1alpha1.TaskSuperseded)
	last := createJobsTask(t, cl, jobsInstance(t, d, ns, 3, "1.0.0"), v1alpha1.WorkflowUpdate)
	end(last, v1alpha1.TaskFailed)

	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), KeepTasks: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.pruneTasks(ctx, &taskRun{task: last, log: logr.Discard()})
	var list v1alpha1.StyrminTaskList
	if err := cl.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, tk := range list.Items {
		left = append(left, tk.Name)
	}
	if want := []string{holder.Name, last.Name}; !slices.Equal(left, want) {
		t.Fatalf("tasks after pruning to one: %v, want %v (the failed upgrade holds the workers stopped)", left, want)
	}
}

// stepJob makes a Job of a step of task (named name), as runJob labels
// it; ended, its status says it completed.
func stepJob(t *testing.T, cl client.Client, task *v1alpha1.StyrminTask, name string, ended bool) *batchv1.Job {
	t.Helper()
	labels := task.Spec.Deployment.Labels()
	labels[LabelTask] = task.Name
	labels[v1alpha1.LabelSequence] = strconv.FormatInt(task.Spec.ToSequence, 10)
	never := corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: task.Namespace, Name: name, Labels: labels},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: never,
			Containers: []corev1.Container{{Name: "app", Image: "busybox", Command: []string{"migrate"}}}}}},
	}
	if err := cl.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if ended {
		completeJob(t, cl, job)
	}
	return job
}

// jobsIn are the names of the Jobs in ns that are not being deleted.
func jobsIn(t *testing.T, cl client.Client, ns string) []string {
	t.Helper()
	var jobs batchv1.JobList
	if err := cl.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range jobs.Items {
		if j.DeletionTimestamp.IsZero() {
			out = append(out, j.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestTheJobsOfPrunedTasksArePrunedWithThem pins how long a runJob step's
// Job lives: as long as its task is kept. Nothing deleted one: every
// change with a migration left its Job and pod in the namespace for
// ever, thousands after months of changes, each read by every later
// runJob step and drift hold. A pruned task's ended Jobs go with it, and
// so do those of a task deleted by hand once they ended and the deployment
// passed its change; a Job that still runs is left to end, and a kept task
// keeps its own.
func TestTheJobsOfPrunedTasksArePrunedWithThem(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	d := maintenanceDriver(t)
	ctx := context.Background()
	var tasks []*v1alpha1.StyrminTask
	for seq := int64(1); seq <= 3; seq++ {
		tk := createJobsTask(t, cl, jobsInstance(t, d, ns, seq, "1.0.0"), v1alpha1.WorkflowUpdate)
		tk.Status.Phase = v1alpha1.TaskSucceeded
		if err := cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
		stepJob(t, cl, tk, JobName("jobs", "migrate", seq), true)
		tasks = append(tasks, tk)
	}
	// A task deleted by hand: one of its Jobs ended, one still runs.
	gone := createJobsTask(t, cl, jobsInstance(t, d, ns, 4, "1.0.0"), v1alpha1.WorkflowUpdate)
	stepJob(t, cl, gone, JobName("jobs", "migrate", 4), true)
	stepJob(t, cl, gone, JobName("jobs", "seed", 4), false)
	if err := cl.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	// The next change succeeded past it, and prunes.
	last := createJobsTask(t, cl, jobsInstance(t, d, ns, 5, "1.0.0"), v1alpha1.WorkflowUpdate)
	last.Status.Phase = v1alpha1.TaskSucceeded
	if err := cl.Status().Update(ctx, last); err != nil {
		t.Fatal(err)
	}
	stepJob(t, cl, last, JobName("jobs", "migrate", 5), true)
	// A chart's own Job is no step's.
	chartJob := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chart-hook", Labels: tasks[0].Spec.Deployment.Labels()},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "hook", Image: "busybox"}}}}}}
	if err := cl.Create(ctx, chartJob); err != nil {
		t.Fatal(err)
	}
	completeJob(t, cl, chartJob)

	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), KeepTasks: 2})
	if err != nil {
		t.Fatal(err)
	}
	r.pruneTasks(ctx, &taskRun{task: last, log: logr.Discard()})
	want := []string{"chart-hook", JobName("jobs", "migrate", 3), JobName("jobs", "migrate", 5), JobName("jobs", "seed", 4)}
	slices.Sort(want)
	if got := jobsIn(t, cl, ns); !slices.Equal(got, want) {
		t.Fatalf("jobs after pruning to two tasks: %v, want %v (the kept tasks', the one still running, the chart's)", got, want)
	}
}

// TestTheEndedJobOfAChangeTheDeploymentHasNotReachedStaysSoItsTaskMadeAgainRunsNoMigrationTwice
// pins that the ended Job of a task deleted by hand stays while the
// deployment has not reached its change: the syncer makes that task again
// (its lock met again) until the deployment runs its sequence, and the
// Job is the only record that the change's migration ran. The next task
// of the deployment to end pruned it, and the task made again ran the
// migration a second time. It takes the Job up instead, as the step's
// run, and runs no Job.
func TestTheEndedJobOfAChangeTheDeploymentHasNotReachedStaysSoItsTaskMadeAgainRunsNoMigrationTwice(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := jobsTaskWith(t, ns, `setup: pre: [
	{action: "runJob", component: "app", job: "migrate", command: ["migrate"]},
	{action: "runJob", component: "app", job: "seed", command: ["seed"]},
]`, Options{})
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}
	r := agent()
	reconcileUntil(t, r, cl, req, "the migration's Job made and recorded", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].Recorded[recordJob] != ""
	})
	var job batchv1.Job
	if err := cl.Get(ctx, key, &job); err != nil {
		t.Fatal(err)
	}
	ran := job.UID
	completeJob(t, cl, &job)
	tk := reconcileUntil(t, r, cl, req, "the seed's Job", func(tk *v1alpha1.StyrminTask) bool {
		return tk.Status.Phase.Terminal() || tk.Status.Steps[1].Recorded[recordJob] != ""
	})

	// Deleted by hand once its seed ended too (before it wrote the
	// deployment); the next task of the deployment to end prunes.
	var seed batchv1.Job
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: JobName("jobs", "seed", 1)}, &seed); err != nil {
		t.Fatal(err)
	}
	completeJob(t, cl, &seed)
	if err := cl.Delete(ctx, tk); err != nil {
		t.Fatal(err)
	}
	r.pruneTasks(ctx, &taskRun{task: tk, log: logr.Discard()})

	// The syncer makes it again.
	again := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tk.Name, Labels: tk.Labels}, Spec: tk.Spec}
	if err := cl.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	tk = reconcileUntil(t, agent(), cl, req, "the migration step of the task made again", func(tk *v1alpha1.StyrminTask) bool {
		rec := ""
		if len(tk.Status.Steps) > 0 {
			rec = tk.Status.Steps[0].Recorded[recordJob]
		}
		return tk.Status.Phase.Terminal() || (rec != "" && rec != string(ran)) || (rec != "" && tk.Status.Steps[0].State.Terminal())
	})
	st := tk.Status.Steps[0]
	if err := cl.Get(ctx, key, &job); err != nil || job.UID != ran || st.State != v1alpha1.StepSucceeded || !strings.Contains(st.Output, "completed") || !strings.Contains(st.Output, "an earlier run's") {
		t.Fatalf("the task made again: Job %s (%v; the one that ran %s), step %s %q %q; want the migration's Job taken up as completed, none run again",
			job.UID, err, ran, st.State, st.Message, st.Output)
	}
}

// TestATaskMadeAgainMeetingTheFailedJobOfTheOneDeletedSaysItIsTheEarlierRuns
// pins what a task made again in the place of one deleted by hand after
// its migration failed does with that Job: it is not run again behind the
// user's back (the step fails), but the message says the failure is the
// earlier run's and what to do. It read as the new task's own failure,
// at once, with no run of its own.
func TestATaskMadeAgainMeetingTheFailedJobOfTheOneDeletedSaysItIsTheEarlierRuns(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTask(t, ns, "")
	ctx := context.Background()
	r := agent()
	reconcileUntil(t, r, cl, req, "the migration's Job made and recorded", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].Recorded[recordJob] != ""
	})
	var job batchv1.Job
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}, &job); err != nil {
		t.Fatal(err)
	}
	failed := job.UID
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now, Failed: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
	}}
	if err := cl.Status().Update(ctx, &job); err != nil {
		t.Fatal(err)
	}
	tk := reconcileUntil(t, r, cl, req, "the task's end", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() })
	if strings.Contains(tk.Status.Message, "earlier run") {
		t.Fatalf("the task whose own Job failed says %q; want no word of an earlier run", tk.Status.Message)
	}

	if err := cl.Delete(ctx, tk); err != nil {
		t.Fatal(err)
	}
	again := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tk.Name, Labels: tk.Labels}, Spec: tk.Spec}
	if err := cl.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	tk = reconcileUntil(t, agent(), cl, req, "the end of the task made again", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() })
	if err := cl.Get(ctx, client.ObjectKeyFromObject(&job), &job); err != nil || job.UID != failed {
		t.Fatalf("the failed Job: %v, UID %s (was %s); want it left, not run again", err, job.UID, failed)
	}
	if tk.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(tk.Status.Message, "an earlier run's") || !strings.Contains(tk.Status.Message, "styrminctl retry") {
		t.Fatalf("the task made again: %s %q; want it failed, saying the Job's failure is the earlier run's and what to do", tk.Status.Phase, tk.Status.Message)
	}
}
