package task

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// goneLocks serves one lockfile until gone is set; then, as a clone a
// force push took the lock commit from, it answers that the commit is
// not there.
type goneLocks struct {
	data []byte
	gone atomic.Bool
}

func (l *goneLocks) LockFile(_ context.Context, ref v1alpha1.LockRef) ([]byte, error) {
	if l.gone.Load() {
		return nil, &instance.LockNotFoundError{Ref: ref, Err: gitsource.ErrCommitNotFound}
	}
	return l.data, nil
}

// maintenanceDriver stops its workers before the instance is written and
// starts them again after: a post step a task must not strand.
func maintenanceDriver(t *testing.T) *drivers.Driver {
	return jobsDriver(t, `setup: {
	pre: [{action: "stopComponents", components: ["app"]}]
	post: [{action: "startComponents", components: ["app"]}]
}`)
}

// lockTask makes in's task as the sync does: its lock and the summary of
// its instance, no copy of it (the agent reads the lock).
func lockTask(t *testing.T, cl client.Client, in *resolver.Instance, locks *goneLocks) *v1alpha1.StyrminTask {
	t.Helper()
	data, err := resolver.EncodeLock(in)
	if err != nil {
		t.Fatal(err)
	}
	locks.data = data
	id := instance.DeploymentID(in.ID)
	ns := in.Context.Deployment.Namespace
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(in.ID.Name, in.Sequence), Namespace: ns, Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: in.Sequence,
			Lock: v1alpha1.LockRef{Commit: "89abcdef0123456789abcdef0123456789abcdef", Path: in.ID.LockPath()},
			Target: &v1alpha1.TaskTarget{Kind: in.Kind, AppVersion: in.AppVersion, SourceCommit: in.SourceCommit, Digest: in.Digest,
				Driver: v1alpha1.DriverRef{Name: in.Driver.Name, Version: in.Driver.Version, Digest: in.Driver.Digest}}},
	}
	if err := cl.Create(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	return tk
}

// workers makes the deployment's Deployment at replicas, running pods
// of them (no controller runs here to change its status).
func workers(t *testing.T, cl client.Client, ns string, replicas, running int32) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "jobs"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}},
	}
	if err := cl.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	dep.Status.Replicas = running
	if err := cl.Status().Update(ctx, dep); err != nil {
		t.Fatal(err)
	}
}

// reconcileUntil reconciles req with r until done says so.
func reconcileUntil(t *testing.T, r *Reconciler, cl client.Client, req reconcile.Request, what string, done func(*v1alpha1.StyrminTask) bool) *v1alpha1.StyrminTask {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := r.Reconcile(context.Background(), req)
		tk := getTask(t, cl, req.NamespacedName)
		if done(tk) {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute (last error %v): task %s %q, steps %+v", what, err, tk.Status.Phase, tk.Status.Message, tk.Status.Steps)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestARunningTaskWhoseLockIsGoneGoesOnWithTheInstanceItsStyrminDeploymentHolds
// pins what a running task does when its lock can no longer be read
// after a restart (a force push took the lock commit from the clone)
// and its core step wrote the instance: it takes the instance from the
// StyrminDeployment and runs its post steps. It failed, skipping every
// step left: the StyrminDeployment held the new instance and the workers
// its pre step stopped stayed at zero.
func TestARunningTaskWhoseLockIsGoneGoesOnWithTheInstanceItsStyrminDeploymentHolds(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	d := maintenanceDriver(t)
	workers(t, cl, ns, 2, 0)
	locks := &goneLocks{}
	in := jobsInstance(t, d, ns, 1, "1.0.0")
	tk := lockTask(t, cl, in, locks)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Locks: locks, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	// The workers are stopped and the instance written; the core step
	// waits for its deployment to be Ready.
	tk = reconcileUntil(t, r, cl, req, "the core step running", func(tk *v1alpha1.StyrminTask) bool {
		i := tk.Status.CurrentStep
		return int(i) < len(tk.Status.Steps) && tk.Status.Steps[i].Action == string(drivers.ActionUpgradeDeploymentVersion) && tk.Status.Steps[i].State == v1alpha1.StepRunning
	})
	var sd v1alpha1.StyrminDeployment
	if err := cl.Get(ctx, instance.Key(ns), &sd); err != nil {
		t.Fatalf("the StyrminDeployment the core step wrote: %v", err)
	}
	var dep appsv1.Deployment
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "jobs"}, &dep); err != nil || *dep.Spec.Replicas != 0 {
		t.Fatalf("the workers while the core step runs: %v, %v replicas; want them stopped", err, dep.Spec.Replicas)
	}

	// The agent restarts; the lock commit is gone from its clone; the
	// deployment becomes Ready at the task's sequence.
	locks.gone.Store(true)
	r, err = NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Locks: locks, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	sd.Status.ObservedGeneration, sd.Status.AppliedSequence = sd.Generation, in.Sequence
	apimeta.SetStatusCondition(&sd.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonSucceeded, Message: "ready", ObservedGeneration: sd.Generation})
	if err := cl.Status().Update(ctx, &sd); err != nil {
		t.Fatal(err)
	}
	tk = reconcileUntil(t, r, cl, req, "the task ended", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() })
	if tk.Status.Phase != v1alpha1.TaskSucceeded {
		t.Fatalf("task %s %q, steps %+v; want it succeeded, its post steps run with the instance its StyrminDeployment holds", tk.Status.Phase, tk.Status.Message, tk.Status.Steps)
	}
	for _, st := range tk.Status.Steps {
		if st.State != v1alpha1.StepSucceeded {
			t.Errorf("step %s %s %q; want every step succeeded", st.Name, st.State, st.Message)
		}
	}
	// Started again at the instance's chart's count (1), as a change's
	// start is (the 2 its stop recorded are the old chart's).
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "jobs"}, &dep); err != nil || dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 {
		t.Errorf("the workers after the task: %v, %v replicas; want them started again at the chart's 1", err, replicasText(dep.Spec.Replicas))
	}
	if err := cl.Get(ctx, instance.Key(ns), &sd); err != nil || sd.Status.ActiveSequence != in.Sequence {
		t.Errorf("StyrminDeployment: %v, active sequence %d; want %d", err, sd.Status.ActiveSequence, in.Sequence)
	}
}

// TestARunningTaskWhoseLockIsGoneBeforeItsInstanceWasWrittenFailsTheStepThatWasRunning
// pins the other side: a running task whose lock can no longer be read
// and whose instance was not written fails, and the step it was running
// says so. All of its steps were skipped, the interrupted one too: no
// step said what failed.
func TestARunningTaskWhoseLockIsGoneBeforeItsInstanceWasWrittenFailsTheStepThatWasRunning(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	d := maintenanceDriver(t)
	workers(t, cl, ns, 2, 2)
	locks := &goneLocks{}
	tk := lockTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), locks)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Locks: locks, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	// The first step scales the workers to zero and waits for their pods
	// to go (no controller here removes them).
	reconcileUntil(t, r, cl, req, "the first step stopping the workers", func(tk *v1alpha1.StyrminTask) bool {
		return len(tk.Status.Steps) > 0 && tk.Status.Steps[0].State == v1alpha1.StepRunning && len(tk.Status.Steps[0].Recorded) > 0
	})

	locks.gone.Store(true)
	r, err = NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Locks: locks, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	tk = reconcileUntil(t, r, cl, req, "the task ended", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() })
	if tk.Status.Phase != v1alpha1.TaskFailed {
		t.Fatalf("task %s %q; want it failed: its instance cannot be had", tk.Status.Phase, tk.Status.Message)
	}
	first := tk.Status.Steps[0]
	if first.State != v1alpha1.StepFailed || !strings.Contains(first.Message, "lock could not be read") || !strings.Contains(first.Message, tk.Spec.Lock.Path) {
		t.Errorf("the step that was running: %s %q; want it failed, saying its lock %s could not be read", first.State, first.Message, tk.Spec.Lock.Path)
	}
	for _, st := range tk.Status.Steps[1:] {
		if st.State != v1alpha1.StepSkipped {
			t.Errorf("step %s %s; want the steps after the failed one skipped", st.Name, st.State)
		}
	}
	if c := apimeta.FindStatusCondition(tk.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonInvalidTask {
		t.Errorf("Ready condition %+v; want reason %s", c, v1alpha1.ReasonInvalidTask)
	}
}

// TestATaskThatFailsBeforeItsFirstStepHasNoStartTime: a task that ended
// before any step (here its lock records another change: LockMismatch)
// was given a start time when it ended. The StyrminDeployment controller
// read that as a task that ran, after the failed upgrade whose stopped
// workers it held, and started them.
func TestATaskThatFailsBeforeItsFirstStepHasNoStartTime(t *testing.T) {
	t.Parallel()
	const ns = "dev-jobs"
	cl := withCRDs(t, ns)
	d := maintenanceDriver(t)
	locks := &goneLocks{}
	tk := lockTask(t, cl, jobsInstance(t, d, ns, 1, "1.0.0"), locks)
	other, err := resolver.EncodeLock(jobsInstance(t, d, ns, 1, "2.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	locks.data = other
	r, err := NewReconciler(Options{Client: cl, Drivers: oneDriver{d}, Locks: locks, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	tk = reconcileUntil(t, r, cl, req, "the task ended", func(tk *v1alpha1.StyrminTask) bool { return tk.Status.Phase.Terminal() })
	if c := apimeta.FindStatusCondition(tk.Status.Conditions, v1alpha1.ConditionReady); tk.Status.Phase != v1alpha1.TaskFailed || c == nil || c.Reason != v1alpha1.ReasonLockMismatch {
		t.Fatalf("task %s (%+v); want it failed: %s", tk.Status.Phase, c, v1alpha1.ReasonLockMismatch)
	}
	if tk.Status.StartedAt != nil || tk.Status.FinishedAt == nil {
		t.Errorf("started at %v, finished at %v; want no start (no step ran) and an end", tk.Status.StartedAt, tk.Status.FinishedAt)
	}
	for _, st := range tk.Status.Steps {
		if st.StartedAt != nil {
			t.Errorf("step %s started at %v", st.Name, st.StartedAt)
		}
	}
}

// replicasText prints a workload's spec.replicas.
func replicasText(n *int32) string {
	if n == nil {
		return "unset"
	}
	return strconv.Itoa(int(*n))
}
