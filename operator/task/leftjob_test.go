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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAJobADeploymentDeletedFromTheNamespaceLeftIsNotTakenForTheStepsRun
// pins, on a real API server, what a runJob step does with a Job at its
// name that a deployment deleted from the namespace before left (an
// environment renamed from qa to dev, its namespacePrefix kept: both
// deployments are "jobs", their first change's migration
// jobs-migrate-1). The step took it as its own run: dev's migration was
// skipped as completed, its schema never migrated, the task green. The
// step waits while the other Job runs, deletes it once it ended, and
// runs a Job of its own.
func TestAJobADeploymentDeletedFromTheNamespaceLeftIsNotTakenForTheStepsRun(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTask(t, ns, "")
	ctx := context.Background()
	old, key := qasJob(t, cl, ns)

	// qa's migration still runs (its task was deleted by hand): waited for.
	r := agent()
	for range 3 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	tk := getTask(t, cl, req.NamespacedName)
	var job batchv1.Job
	if err := cl.Get(ctx, key, &job); err != nil {
		t.Fatal(err)
	}
	if tk.Status.Phase.Terminal() || job.UID != old.UID || tk.Status.Steps[0].Recorded[recordJob] != "" {
		t.Fatalf("while qa's Job runs: task %s %q, Job %s (qa's %s), recorded %q; want the step waiting, qa's Job left alone",
			tk.Status.Phase, tk.Status.Message, job.UID, old.UID, tk.Status.Steps[0].Recorded[recordJob])
	}
	if w := r.lastWaited(tk.UID); !strings.Contains(w, "local/qa/jobs") || !strings.Contains(w, "has not ended") {
		t.Errorf("the step waits for %q; want qa's Job named, not ended", w)
	}

	// qa's migration completed: its end is not dev's.
	completeJob(t, cl, &job)
	reconcileUntil(t, r, cl, req, "qa's Job deleted", func(*v1alpha1.StyrminTask) bool { return foregroundDeleted(t, cl, key) })
	tk = reconcileUntil(t, r, cl, req, "a Job of dev's own", func(tk *v1alpha1.StyrminTask) bool {
		return tk.Status.Phase.Terminal() || (len(tk.Status.Steps) > 0 && tk.Status.Steps[0].Recorded[recordJob] != "")
	})
	st := tk.Status.Steps[0]
	if err := cl.Get(ctx, key, &job); err != nil {
		t.Fatal(err)
	}
	if tk.Status.Phase.Terminal() || st.State != v1alpha1.StepRunning || job.UID == old.UID || st.Recorded[recordJob] != string(job.UID) ||
		job.Labels[v1alpha1.LabelEnvironment] != "dev" {
		t.Fatalf("after qa's Job completed: task %s %q, step %s %q, Job %s of %q (qa's %s), recorded %q; want dev's migration running in a Job of its own",
			tk.Status.Phase, tk.Status.Message, st.State, st.Output, job.UID, job.Labels[v1alpha1.LabelEnvironment], old.UID, st.Recorded[recordJob])
	}
}

// TestAJobNoStepMadeAtTheStepsNameFailsTheStepNamingIt pins that a Job at
// a runJob step's name that no step made (a chart's, a person's) is
// neither taken for the step's run nor deleted, by a retry of the step
// either (it deleted whatever Job held the step's name): the step fails,
// naming it.
func TestAJobNoStepMadeAtTheStepsNameFailsTheStepNamingIt(t *testing.T) {
	t.Parallel()
	for name, retry := range map[string]string{"without retries": "", "with a retry": `attempts: 2, backoff: "1s"`} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			noStepsJob(t, retry)
		})
	}
}

// noStepsJob is TestAJobNoStepMadeAtTheStepsNameFailsTheStepNamingIt for
// a step of the given retry policy.
func noStepsJob(t *testing.T, retry string) {
	const ns = "dev-jobs"
	cl, agent, req := migrationTask(t, ns, retry)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}
	theirs := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "app", Image: "busybox"}},
		}}},
	}
	if err := cl.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	completeJob(t, cl, theirs)
	tk := reconcileUntil(t, agent(), cl, req, "the task's end", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() })
	if tk.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(tk.Status.Message, key.Name) || !strings.Contains(tk.Status.Message, "not one a step") {
		t.Fatalf("task %s %q; want it failed naming job %s, which no step made", tk.Status.Phase, tk.Status.Message, key.Name)
	}
	var job batchv1.Job
	if err := cl.Get(ctx, key, &job); apierrors.IsNotFound(err) || job.UID != theirs.UID {
		t.Fatalf("the Job no step made: %v (UID %s, was %s); want it left alone", err, job.UID, theirs.UID)
	}
}

// TestTheStepsJobStartsOnlyOnceThePodsOfTheJobADeploymentDeletedFromTheNamespaceLeftAreGone
// pins that a runJob step replaces the ended Job a deployment deleted
// from the namespace before left at its name only once that Job's pods
// are gone. The Job was deleted in the background: it went at once, and
// the step's next look made its own Job while the old one's pods still
// ran their shutdown (one stopped at its deadline), two migrations side
// by side; they carry the other deployment's labels, so the step's wait
// for its deployment's own pods did not see them. The deletion is in the
// foreground: the Job stays, being deleted, until the garbage collector
// has removed its pods (the API server here runs none: the test does its
// part).
func TestTheStepsJobStartsOnlyOnceThePodsOfTheJobADeploymentDeletedFromTheNamespaceLeftAreGone(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTask(t, ns, "")
	ctx := context.Background()
	old, key := qasJob(t, cl, ns)
	// qa's migration stopped at its deadline: failed, its pod shutting down.
	now := metav1.Now()
	old.Status = batchv1.JobStatus{StartTime: &now, Failed: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, LastTransitionTime: now},
	}}
	if err := cl.Status().Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name + "-x2x", Labels: old.Labels,
			Finalizers: []string{"styrmin.io/test-shutting-down"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: old.Name, UID: old.UID,
				Controller: &yes, BlockOwnerDeletion: &yes}}},
		Spec: corev1.PodSpec{NodeName: "node-1", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}

	r := agent()
	for range 4 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	tk := getTask(t, cl, req.NamespacedName)
	var job batchv1.Job
	if err := cl.Get(ctx, key, &job); err != nil || job.UID != old.UID || tk.Status.Phase.Terminal() || tk.Status.Steps[0].Recorded[recordJob] != "" {
		t.Fatalf("while qa's pod shuts down: task %s %q, Job %s (%v; qa's %s), recorded %q; want qa's Job kept, being deleted, and no Job of dev's",
			tk.Status.Phase, tk.Status.Message, job.UID, err, old.UID, tk.Status.Steps[0].Recorded[recordJob])
	}
	if job.DeletionTimestamp.IsZero() || !strings.Contains(r.lastWaited(tk.UID), "is being deleted") {
		t.Fatalf("qa's Job deleted at %v, the step waits for %q; want it being deleted, the wait saying so", job.DeletionTimestamp, r.lastWaited(tk.UID))
	}

	// The pod ended; the garbage collector then lets the Job go.
	if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	pod.Finalizers = nil
	if err := cl.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// The kubelet's part (none runs here): the pod bound to a node goes
	// once its containers stopped.
	if err := cl.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if !foregroundDeleted(t, cl, key) {
		t.Fatalf("qa's Job %s is not being deleted in the foreground", key)
	}
	tk = reconcileUntil(t, r, cl, req, "a Job of dev's own", func(tk *v1alpha1.StyrminTask) bool {
		return tk.Status.Phase.Terminal() || tk.Status.Steps[0].Recorded[recordJob] != ""
	})
	if err := cl.Get(ctx, key, &job); err != nil || tk.Status.Phase.Terminal() || job.Labels[v1alpha1.LabelEnvironment] != "dev" {
		t.Fatalf("after qa's pod ended: task %s %q, Job of %q (%v); want dev's migration running in a Job of its own",
			tk.Status.Phase, tk.Status.Message, job.Labels[v1alpha1.LabelEnvironment], err)
	}
}

// foregroundDeleted does the garbage collector's part (the API server of
// these tests runs none) for the Job at key once it is being deleted in
// the foreground: it removes the Job's foregroundDeletion finalizer, as
// the collector does once the Job's pods are gone. It reports whether it
// did (false while the Job is not being deleted so).
func foregroundDeleted(t *testing.T, cl client.Client, key client.ObjectKey) bool {
	t.Helper()
	var job batchv1.Job
	if err := cl.Get(context.Background(), key, &job); err != nil {
		t.Fatal(err)
	}
	if job.DeletionTimestamp.IsZero() || !slices.Contains(job.Finalizers, metav1.FinalizerDeleteDependents) {
		return false
	}
	job.Finalizers = slices.DeleteFunc(job.Finalizers, func(f string) bool { return f == metav1.FinalizerDeleteDependents })
	if err := cl.Update(context.Background(), &job); err != nil {
		t.Fatal(err)
	}
	return true
}

// qasJob makes, in namespace ns, the Job of deployment local/qa/jobs's
// migration at sequence 1 (of its task jobs-1): at the name of dev's step
// whose environment was renamed from qa keeping its namespacePrefix. It
// returns the Job and its key.
func qasJob(t *testing.T, cl client.Client, ns string) (*batchv1.Job, client.ObjectKey) {
	t.Helper()
	return qasJobAt(t, cl, ns, "migrate", 1)
}

// qasJobAt is qasJob for qa's job of the given name at sequence seq (of
// its task jobs-<seq>).
func qasJobAt(t *testing.T, cl client.Client, ns, name string, seq int64) (*batchv1.Job, client.ObjectKey) {
	t.Helper()
	key := client.ObjectKey{Namespace: ns, Name: JobName("jobs", name, seq)}
	labels := v1alpha1.DeploymentID{Cluster: "local", Environment: "qa", Name: "jobs"}.Labels()
	labels[LabelTask] = v1alpha1.TaskName("jobs", seq)
	labels[v1alpha1.LabelSequence] = strconv.FormatInt(seq, 10)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns, Labels: labels},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "app", Image: "busybox", Command: []string{"migrate"}}},
		}}},
	}
	if err := cl.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	return job, key
}

// TestARunJobStepWaitsForARunningJobOfADeploymentDeletedFromTheNamespaceUnderAnotherName
// pins that a runJob step waits for every step Job of its namespace that
// runs, not only its deployment's. An environment renamed from qa to dev,
// its namespacePrefix kept: qa's migration of its change 7
// (jobs-migrate-7, its task deleted) still ran when dev's first change
// came, and dev's jobs-migrate-1 started beside it, two migrations against
// the one database the namespace holds: the wait listed only dev's Jobs.
func TestARunJobStepWaitsForARunningJobOfADeploymentDeletedFromTheNamespaceUnderAnotherName(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTask(t, ns, "")
	ctx := context.Background()
	qa, _ := qasJobAt(t, cl, ns, "migrate", 7)
	devs := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}

	r := agent()
	for range 3 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	tk := getTask(t, cl, req.NamespacedName)
	var job batchv1.Job
	if err := cl.Get(ctx, devs, &job); !apierrors.IsNotFound(err) || tk.Status.Phase.Terminal() {
		t.Fatalf("while qa's migration %s runs: dev's Job %s: %v (UID %s), task %s %q; want no Job of dev's yet, the step waiting",
			qa.Name, devs.Name, err, job.UID, tk.Status.Phase, tk.Status.Message)
	}
	if w := r.lastWaited(tk.UID); !strings.Contains(w, qa.Name) || !strings.Contains(w, "local/qa/jobs") || !strings.Contains(w, "has not ended") {
		t.Errorf("the step waits for %q; want qa's Job %s named, its deployment, not ended", w, qa.Name)
	}

	completeJob(t, cl, qa)
	tk = reconcileUntil(t, r, cl, req, "a Job of dev's own", func(tk *v1alpha1.StyrminTask) bool {
		return tk.Status.Phase.Terminal() || tk.Status.Steps[0].Recorded[recordJob] != ""
	})
	if err := cl.Get(ctx, devs, &job); err != nil || tk.Status.Phase.Terminal() || job.Labels[v1alpha1.LabelEnvironment] != "dev" {
		t.Fatalf("after qa's migration ended: task %s %q, Job %s of %q (%v); want dev's migration running in its own Job",
			tk.Status.Phase, tk.Status.Message, devs.Name, job.Labels[v1alpha1.LabelEnvironment], err)
	}
}

// TestTheEndedJobsOfADeploymentDeletedFromTheNamespaceArePrunedOnceTheirTaskIsGone
// pins that the step Jobs a deployment deleted from the namespace left
// (an environment renamed from qa to dev, its namespacePrefix kept) go
// when a task of the deployment now there ends, as its own would once
// their task is gone: they were never pruned, listed only by their own
// deployment's tasks, and none is left. One that runs stays to end, and
// one whose task is still in the namespace stays with it.
func TestTheEndedJobsOfADeploymentDeletedFromTheNamespaceArePrunedOnceTheirTaskIsGone(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	dev := succeededCreate(t, cl, ns)
	// qa's change 7: its task gone, one Job ended, one running.
	ended, _ := qasJobAt(t, cl, ns, "migrate", 7)
	completeJob(t, cl, ended)
	running, _ := qasJobAt(t, cl, ns, "seed", 7)
	// qa's change 8: its task (no name dev's took) still there.
	kept, _ := qasJobAt(t, cl, ns, "migrate", 8)
	completeJob(t, cl, kept)
	qaTask := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.TaskName("jobs", 8), Labels: kept.Labels},
		Spec:       *dev.Spec.DeepCopy(),
	}
	qaTask.Spec.Deployment.Environment, qaTask.Spec.ToSequence = "qa", 8
	delete(qaTask.Labels, LabelTask)
	delete(qaTask.Labels, v1alpha1.LabelSequence)
	if err := cl.Create(ctx, qaTask); err != nil {
		t.Fatal(err)
	}

	noDriversReconciler(t, cl).pruneTasks(ctx, &taskRun{task: dev, log: logr.Discard()})
	want := []string{running.Name, kept.Name}
	slices.Sort(want)
	if got := jobsIn(t, cl, ns); !slices.Equal(got, want) {
		t.Fatalf("jobs after dev's task ended: %v, want %v (qa's running one, and the one its kept task made)", got, want)
	}
}

// TestAnEndedJobWithoutADeploymentsIdentityLabelsIsNotPruned pins that a
// finishing task prunes a Job of another deployment only when the Job
// names that deployment whole (cluster, environment, deployment): a step
// Job's YAML copied to run a migration again by hand, some labels trimmed
// but styrmin.io/task kept, read as a deployment "{}" with no task in
// the namespace and was deleted, its pod and log with it, at the next
// task's end.
func TestAnEndedJobWithoutADeploymentsIdentityLabelsIsNotPruned(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	dev := succeededCreate(t, cl, ns)
	var want []string
	for name, trim := range map[string][]string{
		"by-hand":        {v1alpha1.LabelCluster, v1alpha1.LabelEnvironment, v1alpha1.LabelDeployment},
		"by-hand-no-env": {v1alpha1.LabelEnvironment},
		"by-hand-own":    {v1alpha1.LabelCluster},
	} {
		job, _ := qasJobAt(t, cl, ns, name, 7)
		if name == "by-hand-own" {
			job.Labels[v1alpha1.LabelEnvironment] = "dev"
		}
		for _, l := range trim {
			delete(job.Labels, l)
		}
		if err := cl.Update(ctx, job); err != nil {
			t.Fatal(err)
		}
		completeJob(t, cl, job)
		want = append(want, job.Name)
	}
	pruned, _ := qasJobAt(t, cl, ns, "migrate", 7)
	completeJob(t, cl, pruned)

	noDriversReconciler(t, cl).pruneTasks(ctx, &taskRun{task: dev, log: logr.Discard()})
	slices.Sort(want)
	if got := jobsIn(t, cl, ns); !slices.Equal(got, want) {
		t.Fatalf("jobs after dev's task ended: %v, want %v (the Jobs lacking an identity label kept, qa's whole one pruned)", got, want)
	}
}

// succeededCreate is the create task of the jobs deployment's first
// change in namespace ns, ended Succeeded.
func succeededCreate(t *testing.T, cl client.Client, ns string) *v1alpha1.StyrminTask {
	t.Helper()
	dev := createJobsTask(t, cl, jobsInstance(t, maintenanceDriver(t), ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	dev.Status.Phase = v1alpha1.TaskSucceeded
	if err := cl.Status().Update(context.Background(), dev); err != nil {
		t.Fatal(err)
	}
	return dev
}

// noDriversReconciler is a task reconciler on cl that loads no driver.
func noDriversReconciler(t *testing.T, cl client.Client) *Reconciler {
	t.Helper()
	r, err := NewReconciler(Options{Client: cl, Drivers: noDrivers{}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
