package task

import (
	"context"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
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
