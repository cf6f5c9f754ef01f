package operator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// TestATaskWhoseChangeIsRecordedActiveAsItsLastStepTimesOutSucceeds pins
// the task's side of instance.ActiveClaims, with a task controller beside
// the StyrminDeployment controller on a real API server. A webapp create
// runs one step, the core one, which waits for its deployment to be Ready;
// a quota of no pods keeps it from ever being so, and the step's deadline
// passes (its start is moved back). When the controller's record of the change as active is under
// way at that moment (the test holds the controller's claim, and writes
// the record itself as the controller would), the task waits for it and
// succeeds: its change is the deployment's active one. When that write
// fails without a definite answer (it may still be made), the task neither
// fails nor succeeds yet, and looks again later. With no record, it fails,
// and the previous instance (none) stays active.
func TestATaskWhoseChangeIsRecordedActiveAsItsLastStepTimesOutSucceeds(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	const timeout = claimsStepTimeout
	r := e.claimsReconciler(t, e.client)
	web := e.instance(t, "local", "dev", "web", 1)
	cases := []struct {
		name string
		// recorded: the controller's record is under way at the deadline;
		// doubtful: and its write then fails without a definite answer.
		recorded, doubtful bool
		wantPhase          v1alpha1.TaskPhase
	}{
		{"recorded", true, false, v1alpha1.TaskSucceeded},
		{"doubtful", true, true, v1alpha1.TaskRunning},
		{"unrecorded", false, false, v1alpha1.TaskFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := renamedInstance(t, web, c.name, "dev-"+c.name)
			ns := in.Context.Deployment.Namespace
			tk, req, _ := e.startUnreadyCreate(t, r, in)
			if n := len(tk.Status.Steps); n != 1 || tk.Status.Steps[0].Action != "upgradeDeploymentVersion" {
				t.Fatalf("steps %+v; want the core step alone", tk.Status.Steps)
			}
			var settle func(error)
			if c.recorded {
				var ok bool
				if settle, ok = e.claims.Record(tk.UID); !ok {
					t.Fatal("the controller's claim on a running task was refused")
				}
			}
			// The step's deadline passes.
			base := tk.DeepCopy()
			tk.Status.Steps[0].StartedAt = &metav1.Time{Time: time.Now().Add(-timeout - time.Minute)}
			if err := e.client.Status().Patch(ctx, tk, client.MergeFrom(base)); err != nil {
				t.Fatal(err)
			}
			type reconciled struct {
				res reconcile.Result
				err error
			}
			done := make(chan reconciled, 1)
			go func() {
				res, err := r.Reconcile(ctx, req)
				done <- reconciled{res, err}
			}()
			switch {
			case c.doubtful:
				select {
				case got := <-done:
					t.Fatalf("the task's reconcile past its deadline returned (%+v) while its change's record was under way; want it to wait", got)
				case <-time.After(time.Second):
				}
				// The API server may still make a write that timed out.
				settle(apierrors.NewTimeoutError("the request did not finish in time", 0))
			case c.recorded:
				select {
				case got := <-done:
					t.Fatalf("the task's reconcile past its deadline returned (%+v) while its change's record was under way; want it to wait", got)
				case <-time.After(time.Second):
				}
				var sd v1alpha1.StyrminDeployment
				if err := e.client.Get(ctx, instance.Key(ns), &sd); err != nil {
					t.Fatal(err)
				}
				base := sd.DeepCopy()
				sd.Status.Active, sd.Status.ActiveSequence = instance.Summary(in, tk.Name), in.Sequence
				if err := e.client.Status().Patch(ctx, &sd, client.MergeFrom(base)); err != nil {
					t.Fatal(err)
				}
				settle(nil)
			}
			select {
			case got := <-done:
				if got.err != nil {
					t.Fatal(got.err)
				}
				if c.doubtful && got.res.RequeueAfter <= 0 {
					t.Errorf("reconcile result %+v with the record in doubt; want a later look", got.res)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the task's reconcile did not return")
			}
			if err := e.client.Get(ctx, req.NamespacedName, tk); err != nil {
				t.Fatal(err)
			}
			st := tk.Status.Steps[0]
			if tk.Status.Phase != c.wantPhase {
				t.Fatalf("task phase %s (step %s: %s %s); want %s", tk.Status.Phase, st.State, st.Message, st.Output, c.wantPhase)
			}
			var sd v1alpha1.StyrminDeployment
			if err := e.client.Get(ctx, instance.Key(ns), &sd); err != nil {
				t.Fatal(err)
			}
			if c.doubtful {
				// Neither failed nor succeeded until the doubt is over.
				if st.State != v1alpha1.StepRunning || sd.Status.ActiveSequence != 0 {
					t.Errorf("step %s, active sequence %d with the record in doubt; want the step running, nothing recorded", st.State, sd.Status.ActiveSequence)
				}
				return
			}
			if c.recorded {
				if st.State != v1alpha1.StepSucceeded || !strings.Contains(st.Output, "records it active") || !strings.Contains(st.Output, "timed out") {
					t.Errorf("step %s, output %q; want it succeeded, saying the change was recorded active before its timeout", st.State, st.Output)
				}
				if sd.Status.ActiveSequence != in.Sequence {
					t.Errorf("active sequence %d; want %d", sd.Status.ActiveSequence, in.Sequence)
				}
				return
			}
			if st.State != v1alpha1.StepFailed || !strings.Contains(st.Message, "timed out") {
				t.Errorf("step %s, message %q; want it failed on its timeout", st.State, st.Message)
			}
			if sd.Status.ActiveSequence != 0 || sd.Status.Active != nil {
				t.Errorf("active %d (%+v) after the task failed; want none", sd.Status.ActiveSequence, sd.Status.Active)
			}
			// The controller can no longer record it, whatever its cache shows.
			if _, ok := e.claims.Record(tk.UID); ok {
				t.Error("the controller's claim on a task that claimed its failure was granted")
			}
		})
	}
}

// TestAFailedEndWhoseAnswerIsLostLeavesThePreviousInstanceActive pins a
// task's reads after a status write whose answer was lost. A webapp
// create's one step (the core one) passes its deadline while a quota of
// no pods keeps its deployment from being Ready, and the task writes its
// Failed end: the API server makes the write but the answer is lost (a
// timeout). The quota then goes, the deployment turns Ready (the
// StyrminDeployment controller does not record the change active: the
// task claimed its failure), and the task is reconciled again with its
// reads served as a cache behind would serve them: the copy from before
// the Failed write, Running, whatever the context's deadline. Reading
// that copy, the task would find its step done, record its instance
// active and then fail to write its success (a conflict): a Failed task
// with its change active, planned against by the next one. It reads the
// task from the API server instead, finds it Failed, and the previous
// instance (none) stays active.
func TestAFailedEndWhoseAnswerIsLostLeavesThePreviousInstanceActive(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	const timeout = claimsStepTimeout
	direct, err := client.NewWithWatch(e.cluster.RESTConfig, client.Options{Scheme: e.client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		stale *v1alpha1.StyrminTask // served for the task once its Failed write is made
		lost  int                   // Failed writes made and answered with a timeout
	)
	cl := interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			mu.Lock()
			s := stale
			mu.Unlock()
			if tk, ok := obj.(*v1alpha1.StyrminTask); ok && s != nil && key == client.ObjectKeyFromObject(s) {
				s.DeepCopyInto(tk)
				return nil
			}
			// A cache answers whatever the context's deadline.
			return c.Get(context.WithoutCancel(ctx), key, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			tk, ok := obj.(*v1alpha1.StyrminTask)
			if !ok || tk.Status.Phase != v1alpha1.TaskFailed {
				return c.SubResource(sub).Update(ctx, obj, opts...)
			}
			var before v1alpha1.StyrminTask
			if err := c.Get(ctx, client.ObjectKeyFromObject(tk), &before); err != nil {
				return err
			}
			if err := c.SubResource(sub).Update(ctx, obj, opts...); err != nil {
				return err
			}
			mu.Lock()
			stale, lost = &before, lost+1
			mu.Unlock()
			return apierrors.NewTimeoutError("the request did not finish in time", 0)
		},
	})
	r := e.claimsReconciler(t, cl)
	in := renamedInstance(t, e.instance(t, "local", "dev", "web", 1), "lost", "dev-lost")
	ns := in.Context.Deployment.Namespace
	tk, req, quota := e.startUnreadyCreate(t, r, in)
	// The step's deadline passes; the task fails, and the answer to its
	// Failed write is lost.
	base := tk.DeepCopy()
	tk.Status.Steps[0].StartedAt = &metav1.Time{Time: time.Now().Add(-timeout - time.Minute)}
	if err := e.client.Status().Patch(ctx, tk, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err == nil {
		t.Fatal("the reconcile whose Failed write timed out returned no error")
	}
	if err := e.client.Get(ctx, req.NamespacedName, tk); err != nil {
		t.Fatal(err)
	}
	if mu.Lock(); lost != 1 || tk.Status.Phase != v1alpha1.TaskFailed {
		mu.Unlock()
		t.Fatalf("task phase %s after %d Failed writes made and unanswered; want Failed after one", tk.Status.Phase, lost)
	}
	mu.Unlock()
	// The deployment turns Ready.
	if err := e.client.Delete(ctx, quota); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 2*time.Minute, "the deployment Ready at its sequence", func(ctx context.Context) (bool, string, error) {
		var sets appsv1.ReplicaSetList
		if err := e.client.List(ctx, &sets, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		for i := range sets.Items {
			// The ReplicaSet controller's back-off after the quota's
			// refusals: a change of the set makes it try at once.
			nudge := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/nudge":"quota-removed"}}}`))
			if err := e.client.Patch(ctx, &sets.Items[i], nudge); err != nil {
				return false, "", err
			}
		}
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, instance.Key(ns), &sd); err != nil {
			return false, err.Error(), nil
		}
		ready, err := instance.Applied(&sd, in.Sequence)
		return ready, fmt.Sprintf("applied %d, conditions %+v (%v)", sd.Status.AppliedSequence, sd.Status.Conditions, err), nil
	})
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("the reconcile after the lost answer: %v; want the task found Failed", err)
	}
	if err := e.client.Get(ctx, req.NamespacedName, tk); err != nil {
		t.Fatal(err)
	}
	var sd v1alpha1.StyrminDeployment
	if err := e.client.Get(ctx, instance.Key(ns), &sd); err != nil {
		t.Fatal(err)
	}
	if tk.Status.Phase != v1alpha1.TaskFailed || sd.Status.ActiveSequence != 0 || sd.Status.Active != nil {
		t.Fatalf("task %s, active sequence %d (%+v); want the task Failed and nothing active", tk.Status.Phase, sd.Status.ActiveSequence, sd.Status.Active)
	}
}

// startUnreadyCreate makes the create task of in (a webapp: one step, the
// core one) in its namespace, with a quota of no pods that keeps the
// deployment from ever being Ready, and reconciles it with r until it is
// Running with its instance written; it returns the task as read then,
// its request and the quota.
func (e *env) startUnreadyCreate(t *testing.T, r *task.Reconciler, in *resolver.Instance) (*v1alpha1.StyrminTask, reconcile.Request, *corev1.ResourceQuota) {
	t.Helper()
	ctx := context.Background()
	ns := in.Context.Deployment.Namespace
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-pods", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	if err := e.client.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	tk := e.createTask(t, in, v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}
	// Plan, start the one step and write the instance.
	for i := 0; ; i++ {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		if err := e.client.Get(ctx, req.NamespacedName, tk); err != nil {
			t.Fatal(err)
		}
		var sd v1alpha1.StyrminDeployment
		err := e.client.Get(ctx, instance.Key(ns), &sd)
		if err == nil && tk.Status.Phase == v1alpha1.TaskRunning && sd.Spec.Sequence == in.Sequence {
			return tk, req, quota
		}
		if i == 10 {
			t.Fatalf("task %s/%s: phase %q after %d reconciles (StyrminDeployment: %v); want Running with its instance written", ns, tk.Name, tk.Status.Phase, i+1, err)
		}
	}
}

// claimsStepTimeout is the step timeout of claimsReconciler's tasks: long
// enough for no setup to reach it on a loaded machine (the tests move a
// step's start back past it instead of waiting).
const claimsStepTimeout = 2 * time.Minute

// claimsReconciler is a task controller beside the environment's
// StyrminDeployment controller, sharing its claims, writing through c and
// reading past it from the API server.
func (e *env) claimsReconciler(t *testing.T, c client.Client) *task.Reconciler {
	t.Helper()
	r, err := task.NewReconciler(task.Options{
		Client:       c,
		APIReader:    e.client,
		Drivers:      &driversource.CatalogSource{Catalog: e.workspace.Catalog},
		Registerer:   prometheus.NewRegistry(),
		ActiveClaims: e.claims,
		StepTimeout:  claimsStepTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
