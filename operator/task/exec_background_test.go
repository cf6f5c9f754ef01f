package task

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// blockingExec runs each command until release is closed (then it
// succeeds) or its context ends; the API server here runs no container.
type blockingExec struct {
	release   chan struct{}
	calls     atomic.Int32
	cancelled atomic.Int32
}

func (e *blockingExec) Exec(ctx context.Context, _, _, _ string, _ []string) (string, string, error) {
	e.calls.Add(1)
	select {
	case <-e.release:
		return "check passed\n", "", nil
	case <-ctx.Done():
		e.cancelled.Add(1)
		return "", "", ctx.Err()
	}
}

// readyJobsPod makes the jobs Deployment of namespace ns and a pod of
// it, Running and Ready (no controller makes them here).
func readyJobsPod(t *testing.T, cl client.Client, ns string) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "jobs"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "jobs", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}},
	}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "jobs-1", Namespace: ns, Labels: labels}, Spec: dep.Spec.Template.Spec}
	for _, o := range []client.Object{dep, pod} {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := cl.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

// reconcileWithin reconciles req, failing the test when the call does not
// return within limit: a task worker held that long.
func reconcileWithin(t *testing.T, r *Reconciler, req reconcile.Request, limit time.Duration) reconcile.Result {
	t.Helper()
	type answer struct {
		res reconcile.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := r.Reconcile(context.Background(), req)
		done <- answer{res, err}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			t.Fatalf("reconcile: %v", a.err)
		}
		return a.res
	case <-time.After(limit):
		t.Fatalf("a reconcile of %s held its worker for more than %s", req.Name, limit)
		return reconcile.Result{}
	}
}

// TestAnExecStepRunsWithoutHoldingATaskWorker pins that a step's command
// runs in the background. It ran inside the task's reconcile, holding a
// worker up to the step's timeout, which the driver sets (a year, say):
// as many deployments running a long command as the agent has task
// workers stopped every other task. The reconcile returns at once while
// the command runs, and the step ends when the command does.
func TestAnExecStepRunsWithoutHoldingATaskWorker(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	readyJobsPod(t, cl, ns)
	d := jobsDriver(t, `setup: pre: [{action: "exec", component: "app", command: ["check"], timeout: "1m"}]`)
	exec := &blockingExec{release: make(chan struct{})}
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), Exec: exec, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	tk := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	for range 5 {
		if res := reconcileWithin(t, r, req, 20*time.Second); res.RequeueAfter <= 0 {
			t.Fatalf("a reconcile while the command runs asks to be run again after %s; want a poll", res.RequeueAfter)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := exec.calls.Load(); n != 1 {
		t.Fatalf("the command ran %d times over five reconciles; want once", n)
	}
	if st := getTask(t, cl, req.NamespacedName).Status.Steps[0]; st.State != v1alpha1.StepRunning || st.Action != "exec" {
		t.Fatalf("step %s %s; want the exec running", st.Name, st.State)
	}
	close(exec.release)
	deadline := time.Now().Add(30 * time.Second)
	for {
		reconcileWithin(t, r, req, 20*time.Second)
		st := getTask(t, cl, req.NamespacedName).Status.Steps[0]
		if st.State == v1alpha1.StepSucceeded {
			if !strings.Contains(st.Output, "check passed") {
				t.Errorf("the exec step's output %q; want the command's", st.Output)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the exec step is %s %q after its command ended", st.State, st.Message)
		}
		time.Sleep(100 * time.Millisecond)
	}

}

// TestAnExecStepThatTimesOutHasItsCommandStopped: the command of a step
// past its timeout is stopped when the step fails, naming the command
// that was running.
func TestAnExecStepThatTimesOutHasItsCommandStopped(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	readyJobsPod(t, cl, ns)
	d := jobsDriver(t, `setup: pre: [{action: "exec", component: "app", command: ["check"], timeout: "1m"}]`)
	ctx := context.Background()
	exec2 := &blockingExec{release: make(chan struct{})}
	r2, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Registerer: prometheus.NewRegistry(), Exec: exec2, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tk2 := createJobsTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), v1alpha1.WorkflowCreate)
	req2 := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk2)}
	for wait := time.Now().Add(30 * time.Second); exec2.calls.Load() == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("the exec step's command did not start: %+v", getTask(t, cl, req2.NamespacedName).Status)
		}
		reconcileWithin(t, r2, req2, 20*time.Second)
	}
	tk2 = getTask(t, cl, req2.NamespacedName)
	base := tk2.DeepCopy()
	tk2.Status.Steps[0].StartedAt = &metav1.Time{Time: time.Now().Add(-2 * time.Minute)}
	if err := cl.Status().Patch(ctx, tk2, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	reconcileWithin(t, r2, req2, 20*time.Second)
	tk2 = getTask(t, cl, req2.NamespacedName)
	if st := tk2.Status.Steps[0]; tk2.Status.Phase != v1alpha1.TaskFailed || st.State != v1alpha1.StepFailed || !strings.Contains(st.Message, "timed out") || !strings.Contains(st.Message, `exec "check" running in pod dev-jobs/jobs-1`) {
		t.Fatalf("task %s, step %s %q; want both failed at the step's timeout, naming the command running", tk2.Status.Phase, st.State, st.Message)
	}
	for wait := time.Now().Add(10 * time.Second); exec2.cancelled.Load() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatal("the command of the step that timed out was not stopped")
		}
	}
}
