package task

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// stuckStepTask is a create task of the maintenance driver in dev-jobs
// whose first step, stopComponents, waits for good: the workers' pods do
// not go (no controller runs here).
func stuckStepTask(t *testing.T) (client.Client, *drivers.Driver, *v1alpha1.StyrminTask, reconcile.Request) {
	t.Helper()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	d := maintenanceDriver(t)
	workers(t, cl, ns, 2, 2)
	tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	return cl, d, tk, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
}

// TestAStepResumedPastItsDeadlineTimesOutRatherThanBlamingTheDriver pins
// how a step whose deadline passed while the task was not reconciled
// ends: timed out. Its action renders the chart first, under the step's
// deadline, and the driver reports a deadline as its own time limit
// ("make the driver smaller"): the step failed as a driver problem, not
// as a step that timed out.
func TestAStepResumedPastItsDeadlineTimesOutRatherThanBlamingTheDriver(t *testing.T) {
	t.Parallel()
	cl, d, tk, req := stuckStepTask(t)
	ctx := context.Background()
	const timeout = 2 * time.Minute
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), StepTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	tk = reconcileUntil(t, r, cl, req, "the first step stopping the workers", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State == v1alpha1.StepRunning && len(tk.Status.Steps[0].Recorded) > 0
	})

	// The step's deadline passes before the task is reconciled again.
	base := tk.DeepCopy()
	tk.Status.Steps[0].StartedAt = &metav1.Time{Time: time.Now().Add(-timeout - time.Minute)}
	if err := cl.Status().Patch(ctx, tk, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	tk = getTask(t, cl, req.NamespacedName)
	st := tk.Status.Steps[0]
	if tk.Status.Phase != v1alpha1.TaskFailed || st.State != v1alpha1.StepFailed || !strings.HasPrefix(st.Message, "timed out after "+timeout.String()) ||
		!strings.Contains(tk.Status.Message, "("+v1alpha1.ReasonStepTimedOut+")") {
		t.Fatalf("task %s %q, step %s %q; want the step failed on its timeout (%s)", tk.Status.Phase, tk.Status.Message, st.State, st.Message, v1alpha1.ReasonStepTimedOut)
	}
	if strings.Contains(st.Message, "driver smaller") {
		t.Errorf("step message %q blames the driver for the step's own deadline", st.Message)
	}
}

// TestAStepInterruptedByMoreRestartsThanTheAgentResumesFails pins the
// bound on resuming: each agent (a new reconciler: it did not start the
// step) resumes a step it finds Running and starts its clock again, so an
// agent restarting more often than the step's timeout kept a stuck step
// Running for ever. Past MaxStepResumes the step fails, naming why.
func TestAStepInterruptedByMoreRestartsThanTheAgentResumesFails(t *testing.T) {
	t.Parallel()
	cl, d, tk, req := stuckStepTask(t)
	ctx := context.Background()
	const resumes = 2
	agent := func() *Reconciler {
		r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(),
			StepTimeout: time.Hour, MaxStepResumes: resumes})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	reconcileUntil(t, agent(), cl, req, "the first step stopping the workers", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State == v1alpha1.StepRunning && len(tk.Status.Steps[0].Recorded) > 0
	})
	for i := 1; i <= resumes; i++ {
		if _, err := agent().Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		tk = getTask(t, cl, req.NamespacedName)
		if st := tk.Status.Steps[0]; tk.Status.Phase != v1alpha1.TaskRunning || st.State != v1alpha1.StepRunning || st.Resumes != int32(i) {
			t.Fatalf("after restart %d: task %s, step %s resumed %d times; want it Running, resumed %d times", i, tk.Status.Phase, st.State, st.Resumes, i)
		}
	}
	if _, err := agent().Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	tk = getTask(t, cl, req.NamespacedName)
	st := tk.Status.Steps[0]
	if tk.Status.Phase != v1alpha1.TaskFailed || st.State != v1alpha1.StepFailed ||
		!strings.Contains(tk.Status.Message, "("+v1alpha1.ReasonStepInterrupted+")") || !strings.Contains(st.Message, "restarted while this step ran 3 times") {
		t.Fatalf("task %s %q, step %s %q; want the step failed as interrupted (%s) after the third restart", tk.Status.Phase, tk.Status.Message, st.State, st.Message, v1alpha1.ReasonStepInterrupted)
	}
	for _, later := range tk.Status.Steps[1:] {
		if later.State != v1alpha1.StepSkipped {
			t.Errorf("step %s %s after the interrupted one failed; want Skipped", later.Name, later.State)
		}
	}
}

// answerLost writes through to the API server, and loses the answer of
// the first status write that starts a task's first step: the write is
// applied, the caller is told it timed out (an API server that answered
// too late).
type answerLost struct {
	client.Client
	lost atomic.Bool
}

func (a *answerLost) Status() client.SubResourceWriter { return lostStatus{a.Client.Status(), &a.lost} }

type lostStatus struct {
	client.SubResourceWriter
	lost *atomic.Bool
}

func (s lostStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := s.SubResourceWriter.Update(ctx, obj, opts...); err != nil {
		return err
	}
	if tk, ok := obj.(*v1alpha1.StyrminTask); ok && len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State == v1alpha1.StepRunning && s.lost.CompareAndSwap(false, true) {
		return apierrors.NewTimeoutError("the answer was lost", 1)
	}
	return nil
}

// TestAStartWhoseAnswerWasLostIsNoRestart pins that a step's start whose
// write the API server applied but whose answer the agent did not get (a
// timeout) is not taken for a step an agent restart interrupted: it was
// counted a resume (and a new attempt), and a few such hiccups failed the
// step as StepInterrupted, blaming restarts that never happened.
func TestAStartWhoseAnswerWasLostIsNoRestart(t *testing.T) {
	t.Parallel()
	cl, d, tk, req := stuckStepTask(t)
	ctx := context.Background()
	lossy := &answerLost{Client: cl}
	r, err := NewReconciler(Options{Client: lossy, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), StepTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20 && !lossy.lost.Load(); i++ {
		if _, err := r.Reconcile(ctx, req); err != nil && !apierrors.IsTimeout(errors.Unwrap(err)) && !strings.Contains(err.Error(), "the answer was lost") {
			t.Fatal(err)
		}
	}
	if !lossy.lost.Load() {
		t.Fatal("the step never started")
	}
	tk = reconcileUntil(t, r, cl, req, "the first step stopping the workers", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && len(tk.Status.Steps[0].Recorded) > 0
	})
	if st := tk.Status.Steps[0]; st.State != v1alpha1.StepRunning || st.Attempts != 1 || st.Resumes != 0 {
		t.Fatalf("step %s after %d attempts, resumed %d times; want Running, one attempt, no resume", st.State, st.Attempts, st.Resumes)
	}
}

// TestARunJobStepsJobMadeLateInTheStepGetsWhatIsLeftOfItsTimeoutAsItsDeadline
// pins the deadline of a Job a runJob step makes after waiting: what is
// left of the step's timeout. A step that waited ten of its fifteen
// minutes for another Job of the namespace to end (one a deployment
// deleted from it before left running) gave its Job the whole fifteen:
// the step timed out at its fifteenth minute and the Job, were the agent
// down or its deletion refused then, ran on for ten more, a migration
// after its task said it failed.
func TestARunJobStepsJobMadeLateInTheStepGetsWhatIsLeftOfItsTimeoutAsItsDeadline(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl, agent, req := migrationTask(t, ns, "")
	ctx := context.Background()
	qa, _ := qasJobAt(t, cl, ns, "migrate", 7)
	r := agent()
	tk := reconcileUntil(t, r, cl, req, "the step waiting for qa's Job", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State == v1alpha1.StepRunning
	})
	// Ten minutes of its fifteen waited.
	base := tk.DeepCopy()
	tk.Status.Steps[0].StartedAt = &metav1.Time{Time: time.Now().Add(-10 * time.Minute)}
	if err := cl.Status().Patch(ctx, tk, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	completeJob(t, cl, qa)
	reconcileUntil(t, r, cl, req, "dev's Job", func(tk *v1alpha1.StyrminTask) bool {
		return tk.Status.Phase.Terminal() || tk.Status.Steps[0].Recorded[recordJob] != ""
	})
	var job batchv1.Job
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: JobName("jobs", "migrate", 1)}, &job); err != nil {
		t.Fatal(err)
	}
	left := int64((DefaultStepTimeout - 10*time.Minute) / time.Second)
	got := int64(-1) // none
	if job.Spec.ActiveDeadlineSeconds != nil {
		got = *job.Spec.ActiveDeadlineSeconds
	}
	if got > left || got < left-60 {
		t.Fatalf("the Job made ten minutes into its step has activeDeadlineSeconds %d; want what is left of the step's %s, about %d", got, DefaultStepTimeout, left)
	}
}
