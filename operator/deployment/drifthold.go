package deployment

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/health"
	"github.com/styrmin/styrmin/operator/instance"
)

// taskHold says why the drift check of a deployment waits for its tasks.
type taskHold struct {
	// why says why ("" when nothing holds it).
	why string
	// stopped is set when failed tasks left components stopped (not
	// while a task runs): that waits for a person, so Ready says so too.
	stopped bool
}

// driftHold says why the drift check of the deployment in namespace
// waits, from its tasks as tasks (the cache, or the API server) lists them
// and the Jobs of its steps as jobs (the cache) lists them: a task runs
// (its steps change workloads on purpose), or failed tasks stopped
// components no task started since (an upgrade whose migration failed, a
// restore that failed halfway: starting the old workers on half-migrated
// or half-restored data is what the stop was for; instance.LeftStopped
// says which and what ends it), or a Job the agent made for a step has
// not ended though no task runs (its task deleted by hand while the
// migration ran: the workers it stopped stay stopped until it ends).
func driftHold(ctx context.Context, tasks, jobs client.Reader, namespace string) (taskHold, error) {
	var list v1alpha1.StyrminTaskList
	// Read only: the cache's own tasks, not copies.
	if err := tasks.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return taskHold{}, fmt.Errorf("listing the tasks of %s: %w", namespace, err)
	}
	for i := range list.Items {
		if list.Items[i].Status.Phase == v1alpha1.TaskRunning {
			return taskHold{why: "task " + list.Items[i].Name + " is running: its steps change workloads on purpose"}, nil
		}
	}
	held := instance.LeftStopped(list.Items)
	if len(held) == 0 {
		return jobHold(ctx, jobs, namespace)
	}
	whys := make([]string, 0, len(held))
	for _, h := range held {
		whys = append(whys, fmt.Sprintf("task %s failed after stopping %s: they stay stopped until %s",
			h.Task.Name, strings.Join(h.Components, ", "), untilWhat(h.Task)))
	}
	return taskHold{why: strings.Join(whys, "; "), stopped: true}, nil
}

// jobHold says which Job the agent made for a step of the deployment in
// namespace (labelled v1alpha1.LabelTask; the namespace is the
// deployment's alone) has not ended, as jobs lists them. A Job
// outlives its task: one deleted by hand mid-migration leaves no task to
// hold the drift check, and the workers its steps stopped would be started
// on half-migrated data. A Job being deleted still holds: its pods stop
// first.
func jobHold(ctx context.Context, jobs client.Reader, namespace string) (taskHold, error) {
	var list batchv1.JobList
	if err := jobs.List(ctx, &list, client.InNamespace(namespace), client.HasLabels{v1alpha1.LabelTask}, client.UnsafeDisableDeepCopy); err != nil {
		return taskHold{}, fmt.Errorf("listing the step jobs of %s: %w", namespace, err)
	}
	for i := range list.Items {
		j := &list.Items[i]
		if health.JobEnded(j) {
			continue
		}
		return taskHold{why: fmt.Sprintf("job %s of task %s has not ended (its task is no longer running): the workloads its steps changed stay as they are until it ends or is deleted",
			j.Name, j.Labels[v1alpha1.LabelTask])}, nil
	}
	return taskHold{}, nil
}

// TrimStepJob is the cache transform of the Jobs the agent made for task
// steps: the drift check reads only their names, labels and whether they
// ended (jobHold), and finished Jobs stay in the cluster, so the cache
// keeps nothing else of them. The task controller reads a step's Jobs
// from the API server; only its pruning of ended Jobs lists the trimmed
// copies (their names, labels and end suffice).
func TrimStepJob(obj any) (any, error) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		trimmed, err := TrimStepJob(d.Obj)
		return toolscache.DeletedFinalStateUnknown{Key: d.Key, Obj: trimmed}, err
	}
	j, ok := obj.(*batchv1.Job)
	if !ok {
		return obj, nil
	}
	j.ManagedFields, j.Annotations, j.OwnerReferences = nil, nil, nil
	j.Spec = batchv1.JobSpec{}
	j.Status = batchv1.JobStatus{Conditions: health.JobEndConditions(j)}
	return j, nil
}

// untilWhat says what ends the hold on the components failed task t
// stopped.
func untilWhat(t *v1alpha1.StyrminTask) string {
	op := t.Spec.Operation
	switch {
	case op == nil:
		return "a retry (styrminctl retry) or a fix succeeds"
	case op.Kind == v1alpha1.OperationRestore:
		return "the restore is retried (styrminctl restore retry " + op.Name + ") and starts them, or deleted"
	default:
		return "a backup starts them, a change succeeds, or StyrminBackup " + op.Name + " is deleted"
	}
}

// stoppedByRunningTask are the components the running task of the
// deployment in namespace stopped and has not started again, as tasks
// (the cache) lists them: its release's apply keeps their workloads at
// zero (release.Request.Stopped). A task writes its stop step's start,
// and the replicas it records, before it scales, and its core step's
// spec write comes after the stop ended: the cache has seen the stop by
// then. No request: the cache's list, its running tasks kept whole.
func stoppedByRunningTask(ctx context.Context, tasks client.Reader, namespace string) ([]string, error) {
	var list v1alpha1.StyrminTaskList
	if err := tasks.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the tasks of %s: %w", namespace, err)
	}
	var stopped []string
	for i := range list.Items {
		if list.Items[i].Status.Phase == v1alpha1.TaskRunning {
			stopped = append(stopped, instance.StoppedNow(&list.Items[i])...)
		}
	}
	return stopped, nil
}
