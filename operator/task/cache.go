package task

import (
	"k8s.io/client-go/tools/cache"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
)

// TrimFinished is the agent's cache transform for StyrminTasks. A
// finished task (Succeeded, Failed or Superseded) that applied a lock is
// cached without its conditions, and without its steps but for what the
// StyrminDeployment controller reads of them (instance.HoldSteps: the
// trimmed steps of a task that did not succeed after it stopped or
// started components, which may hold them stopped): a deployment keeps
// ten of them, so at thousands of deployments they were most of the
// cached tasks' memory. What the agent reads of a finished task there is
// its spec, phase, message and times (the active instance, the history
// kept, the order of tasks, the UI's lists); the UI's task page reads the
// whole task from the API server. A task still running keeps everything:
// its steps are its progress. An operation's task (a backup or a
// restore) keeps its steps too: the backup's size is read from its jobs'
// output. The controller never writes a finished task, so a trimmed copy
// is never written back. managedFields are dropped from every task, as
// for every other cached object.
func TrimFinished(obj any) (any, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		trimmed, err := TrimFinished(d.Obj)
		return cache.DeletedFinalStateUnknown{Key: d.Key, Obj: trimmed}, err
	}
	t, ok := obj.(*v1alpha1.StyrminTask)
	if !ok {
		return obj, nil
	}
	t.ManagedFields = nil
	if t.Status.Phase.Terminal() && !IsOperation(t) {
		t.Status.Steps = instance.HoldSteps(t)
		t.Status.Conditions = nil
	}
	return t, nil
}
