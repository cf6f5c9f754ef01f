package operator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// TestTaskWaitingForAnEarlierOneShowsItsPlan pins that a task which has
// to wait for an earlier task of its deployment writes its planned steps
// (Pending) before it waits: a task that can run at once writes them only
// with its first step's start, which must not leave a waiting task blank.
func TestTaskWaitingForAnEarlierOneShowsItsPlan(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	r, err := task.NewReconciler(task.Options{
		Client:     e.client,
		Drivers:    &driversource.CatalogSource{Catalog: e.workspace.Catalog},
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	in1 := e.instance(t, "local", "dev", "web", 1)
	in2 := withMessage(t, in1, 2, "second")
	ns := in1.Context.Deployment.Namespace
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	task := func(in *resolver.Instance, wf v1alpha1.Workflow) *v1alpha1.StyrminTask {
		return e.createTask(t, in, wf)
	}
	task(in1, v1alpha1.WorkflowCreate) // not started: the second waits for it
	second := task(in2, v1alpha1.WorkflowUpdate)

	res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(second)})
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("reconcile of the waiting task: %+v, %v; want a later look", res, err)
	}
	var got v1alpha1.StyrminTask
	if err := e.client.Get(ctx, client.ObjectKeyFromObject(second), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1alpha1.TaskPending || len(got.Status.Steps) == 0 {
		t.Fatalf("waiting task: phase %q, %d steps; want Pending with its plan", got.Status.Phase, len(got.Status.Steps))
	}
	for _, s := range got.Status.Steps {
		if s.State != v1alpha1.StepPending {
			t.Fatalf("step %s is %s before the task's turn", s.Name, s.State)
		}
	}
}

// TestFinishedTasksBeyondTheKeptHistoryAreDeleted pins the history bound:
// when a task finishes, its deployment's finished tasks beyond the newest
// KeepTasks are deleted, and a task that has not finished is kept.
func TestFinishedTasksBeyondTheKeptHistoryAreDeleted(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	r, err := task.NewReconciler(task.Options{
		Client:     e.client,
		Drivers:    &driversource.CatalogSource{Catalog: e.workspace.Catalog},
		KeepTasks:  1,
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	in1 := e.instance(t, "local", "dev", "web", 1)
	ns := in1.Context.Deployment.Namespace
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	task := func(in *resolver.Instance, wf v1alpha1.Workflow) *v1alpha1.StyrminTask {
		return e.createTask(t, in, wf)
	}
	first := task(in1, v1alpha1.WorkflowCreate)
	first.Status.Phase = v1alpha1.TaskSucceeded
	if err := e.client.Status().Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := task(withMessage(t, in1, 2, "second"), v1alpha1.WorkflowUpdate)
	task(withMessage(t, in1, 3, "third"), v1alpha1.WorkflowUpdate) // overtakes the second, not started

	// The second is overtaken: it ends Superseded without running, and the
	// history keeps one finished task, itself.
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(second)}); err != nil {
		t.Fatal(err)
	}
	var list v1alpha1.StyrminTaskList
	if err := e.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range list.Items {
		got = append(got, tk.Name+"="+string(tk.Status.Phase))
	}
	if strings.Join(got, " ") != "web-2=Superseded web-3=" {
		t.Fatalf("tasks after the second finished with KeepTasks 1: %v; want web-1 deleted, web-2 Superseded, web-3 not started", got)
	}
}
