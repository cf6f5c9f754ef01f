package task

import (
	"context"
	"strings"
	"testing"

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
	key := client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}
	gone := v1alpha1.DeploymentID{Cluster: "local", Environment: "qa", Name: "jobs"}
	labels := gone.Labels()
	labels[LabelTask] = v1alpha1.TaskName("jobs", 1)
	old := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns, Labels: labels},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "app", Image: "busybox", Command: []string{"migrate"}}},
		}}},
	}
	if err := cl.Create(ctx, old); err != nil {
		t.Fatal(err)
	}

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
