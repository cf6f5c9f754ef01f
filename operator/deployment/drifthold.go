package deployment

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
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

// driftHold says why the drift check of namespace waits, from its tasks
// as c (the cache, or the API server) lists them: a task runs (its steps
// change workloads on purpose), or failed tasks stopped components no
// task started since (an upgrade whose migration failed, a restore that
// failed halfway: starting the old workers on half-migrated or
// half-restored data is what the stop was for; instance.LeftStopped says
// which and what ends it).
func driftHold(ctx context.Context, c client.Reader, namespace string) (taskHold, error) {
	var tasks v1alpha1.StyrminTaskList
	// Read only: the cache's own tasks, not copies.
	if err := c.List(ctx, &tasks, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return taskHold{}, fmt.Errorf("listing the tasks of %s: %w", namespace, err)
	}
	for i := range tasks.Items {
		if tasks.Items[i].Status.Phase == v1alpha1.TaskRunning {
			return taskHold{why: "task " + tasks.Items[i].Name + " is running: its steps change workloads on purpose"}, nil
		}
	}
	held := instance.LeftStopped(tasks.Items)
	if len(held) == 0 {
		return taskHold{}, nil
	}
	whys := make([]string, 0, len(held))
	for _, h := range held {
		whys = append(whys, fmt.Sprintf("task %s failed after stopping %s: they stay stopped until %s",
			h.Task.Name, strings.Join(h.Components, ", "), untilWhat(h.Task)))
	}
	return taskHold{why: strings.Join(whys, "; "), stopped: true}, nil
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
