package deployment

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// driftHold says why the drift check of namespace waits, "" when it does
// not, from its tasks as c (the cache, or the API server) lists them: a
// task runs (its steps change workloads on purpose), or the last task to
// run failed after stopping components it did not start again (an
// upgrade whose migration failed, a restore that failed halfway: starting
// the old workers on half-migrated or half-restored data is what the
// stop was for). That hold ends when another task starts (a retry, a
// fix, a restore's retry) or the failed task is deleted.
func driftHold(ctx context.Context, c client.Reader, namespace string) (string, error) {
	var tasks v1alpha1.StyrminTaskList
	// Read only: the cache's own tasks, not copies.
	if err := c.List(ctx, &tasks, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("listing the tasks of %s: %w", namespace, err)
	}
	for i := range tasks.Items {
		if tasks.Items[i].Status.Phase == v1alpha1.TaskRunning {
			return "task " + tasks.Items[i].Name + " is running: its steps change workloads on purpose", nil
		}
	}
	last := lastStarted(tasks.Items)
	if last == nil || last.Status.Phase != v1alpha1.TaskFailed {
		return "", nil
	}
	if stopped := leftStopped(last); len(stopped) > 0 {
		how := "a retry (styrminctl retry) or a fix runs"
		if op := last.Spec.Operation; op != nil && op.Kind == v1alpha1.OperationRestore {
			how = "the restore is retried (styrminctl restore retry " + op.Name + ") or deleted"
		}
		return fmt.Sprintf("task %s failed after stopping %s: they stay stopped until %s",
			last.Name, strings.Join(stopped, ", "), how), nil
	}
	return "", nil
}

// lastStarted is the task that started last (nil when none started). A
// deployment's tasks run one at a time, so it is the one whose outcome the
// workloads show.
func lastStarted(tasks []v1alpha1.StyrminTask) *v1alpha1.StyrminTask {
	var last *v1alpha1.StyrminTask
	for i := range tasks {
		t := &tasks[i]
		if t.Status.StartedAt == nil {
			continue
		}
		if last == nil || last.Status.StartedAt.Before(t.Status.StartedAt) ||
			last.Status.StartedAt.Equal(t.Status.StartedAt) && startsLater(t, last) {
			last = t
		}
	}
	return last
}

// startsLater breaks a tie of start times (they are kept to the second):
// the higher sequence, then the operation after the change, then the name.
func startsLater(t, than *v1alpha1.StyrminTask) bool {
	if t.Spec.ToSequence != than.Spec.ToSequence {
		return t.Spec.ToSequence > than.Spec.ToSequence
	}
	if to, tho := t.Spec.Operation != nil, than.Spec.Operation != nil; to != tho {
		return to
	}
	return t.Name > than.Name
}

// leftStopped names, sorted, the components task t stopped (a
// stopComponents step that started, whatever its end) and did not start
// again (no startComponents step of theirs succeeded after it).
func leftStopped(t *v1alpha1.StyrminTask) []string {
	stopped := map[string]bool{}
	for _, st := range t.Status.Steps {
		switch {
		case st.Action == string(drivers.ActionStopComponents) && st.State != v1alpha1.StepPending && st.State != v1alpha1.StepSkipped && st.State != "":
			for _, c := range st.Components {
				stopped[c] = true
			}
		case st.Action == string(drivers.ActionStartComponents) && st.State == v1alpha1.StepSucceeded:
			for _, c := range st.Components {
				delete(stopped, c)
			}
		}
	}
	out := make([]string, 0, len(stopped))
	for c := range stopped {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
