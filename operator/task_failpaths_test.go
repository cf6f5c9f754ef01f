package operator_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/task"
)

// postCheckDriver is a driver of one Deployment whose setup hook ends
// with a post exec step (a check in the running application).
func postCheckDriver(t *testing.T) *drivers.Driver {
	t.Helper()
	const spec = `name:        "postcheck"
version:     "1.0.0"
appVersions: ">=1.0.0"
chart:       "chart"
parameters: {
	// Shown by the application.
	message: *"hello" | string
}
components: app: workloads: [{kind: "Deployment", name: context.deployment.name}]
values: message: context.parameters.message
actions: setup: post: [{action: "exec", component: "app", command: ["check"], timeout: "1m"}]
`
	const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: postcheck}
  template:
    metadata:
      labels: {app: postcheck}
    spec:
      containers:
        - name: app
          image: busybox
          env: [{name: MESSAGE, value: {{ .Values.message | quote }}}]
`
	d, err := drivers.Load(fstest.MapFS{
		"driver.cue":                      {Data: []byte(spec)},
		"chart/Chart.yaml":                {Data: []byte("apiVersion: v2\nname: postcheck\nversion: 1.0.0\n")},
		"chart/values.yaml":               {Data: []byte("message: hello\n")},
		"chart/templates/deployment.yaml": {Data: []byte(deployment)},
	}, drivers.LoadOptions{Source: "drivers/postcheck/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// okExec answers every command as done (the fake nodes run no process),
// but past its context's deadline.
type okExec struct{ calls atomic.Int32 }

func (e *okExec) Exec(ctx context.Context, _, _, _ string, _ []string) (string, string, error) {
	e.calls.Add(1)
	if err := ctx.Err(); err != nil {
		return "", "", err
	}
	return "check passed\n", "", nil
}

// TestATaskWhoseChangeWasRecordedActiveBeforeItsEndWasWrittenDoesNotFail
// pins a task whose last step is no core step, ending. It records its
// change active on the StyrminDeployment, then writes its own end;
// when that write is refused (or lost, or the agent is killed), the task
// read back is Running at its last step, which runs again. Here its
// deadline has passed meanwhile, the step failed, and the task ended
// Failed while its deployment recorded its change active. A failed task
// leaves the previous instance active; this one's change is active, so
// the task succeeds, saying what would have failed it.
func TestATaskWhoseChangeWasRecordedActiveBeforeItsEndWasWrittenDoesNotFail(t *testing.T) {
	t.Parallel()
	d := postCheckDriver(t)
	e := startEnvWith(t, d)
	ctx := context.Background()
	direct, err := client.NewWithWatch(e.cluster.RESTConfig, client.Options{Scheme: e.client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	var refuse atomic.Bool
	refuse.Store(true)
	cl := interceptor.NewClient(direct, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if tk, ok := obj.(*v1alpha1.StyrminTask); ok && tk.Status.Phase.Terminal() && refuse.Load() {
				refused.Add(1)
				return apierrors.NewServiceUnavailable("refused by the test")
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	exec := &okExec{}
	r, err := task.NewReconciler(task.Options{
		Client:       cl,
		APIReader:    e.client,
		Drivers:      &driversource.CatalogSource{Catalog: e.workspace.Catalog},
		Registerer:   prometheus.NewRegistry(),
		ActiveClaims: e.claims,
		StepTimeout:  claimsStepTimeout,
		Exec:         exec,
	})
	if err != nil {
		t.Fatal(err)
	}
	in := tenantInstance(t, d, "checked", 1, nil, nil)
	ns := in.Context.Deployment.Namespace
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	tk := e.createTask(t, in, v1alpha1.WorkflowCreate)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tk)}

	// The task runs to its end, whose write is refused.
	agenttest.WaitUntil(t, 3*time.Minute, "the task's end written and refused", func(ctx context.Context) (bool, string, error) {
		_, err := r.Reconcile(ctx, req)
		if refused.Load() > 0 {
			return true, "", nil
		}
		if err := e.client.Get(ctx, req.NamespacedName, tk); err != nil {
			return false, "", err
		}
		if tk.Status.Phase.Terminal() {
			return false, "", errors.New("the task ended " + string(tk.Status.Phase) + " before its end could be refused: " + tk.Status.Message)
		}
		time.Sleep(500 * time.Millisecond)
		return false, "reconcile: " + errString(err) + "; phase " + string(tk.Status.Phase), nil
	})
	if exec.calls.Load() == 0 {
		t.Fatal("the task's end was written before its exec step ran")
	}
	var sd v1alpha1.StyrminDeployment
	if err := e.client.Get(ctx, instance.Key(ns), &sd); err != nil {
		t.Fatal(err)
	}
	if a := sd.Status.Active; a == nil || a.Sequence != in.Sequence || a.Task != tk.Name {
		t.Fatalf("StyrminDeployment records %+v active; want the task's change, recorded before its end", a)
	}
	if err := e.client.Get(ctx, req.NamespacedName, tk); err != nil {
		t.Fatal(err)
	}
	last := len(tk.Status.Steps) - 1
	if tk.Status.Phase != v1alpha1.TaskRunning || int(tk.Status.CurrentStep) != last || tk.Status.Steps[last].Action != "exec" || tk.Status.Steps[last].State != v1alpha1.StepRunning {
		t.Fatalf("task %s at step %d (%+v); want it running its last step, the exec", tk.Status.Phase, tk.Status.CurrentStep, tk.Status.Steps)
	}

	// The step's deadline passes before the task is reconciled again.
	base := tk.DeepCopy()
	tk.Status.Steps[last].StartedAt = &metav1.Time{Time: time.Now().Add(-2 * time.Minute)}
	if err := e.client.Status().Patch(ctx, tk, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	refuse.Store(false)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := e.client.Get(ctx, req.NamespacedName, tk); err != nil {
		t.Fatal(err)
	}
	st := tk.Status.Steps[last]
	if tk.Status.Phase != v1alpha1.TaskSucceeded || st.State != v1alpha1.StepSucceeded || !strings.Contains(st.Output, "records it active") {
		t.Fatalf("task %s (%s), its last step %s %q %q; want both succeeded, saying the change is recorded active", tk.Status.Phase, tk.Status.Message, st.State, st.Message, st.Output)
	}
	if err := e.client.Get(ctx, instance.Key(ns), &sd); err != nil {
		t.Fatal(err)
	}
	if sd.Status.ActiveSequence != in.Sequence {
		t.Errorf("active sequence %d; want %d", sd.Status.ActiveSequence, in.Sequence)
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
