package operation

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// releaseForeign removes the finalizer of operation o, made outside the
// agent's namespace, and touches nothing else. A task names its
// operation by name alone, which is the one of that name in the agent's
// namespace: none is o's, so o's deletion has nothing to wait for or
// delete. An older agent added the finalizer before it refused o; left,
// the deletion path would delete (or wait for) the tasks of the real
// operation of the same name.
func releaseForeign(ctx context.Context, c client.Client, o client.Object) error {
	if !controllerutil.ContainsFinalizer(o, Finalizer) {
		return nil
	}
	base := o.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(o, Finalizer)
	if err := patchFinalizers(ctx, c, o, base); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("removing the finalizer of %s/%s, made outside the agent's namespace: %w", o.GetNamespace(), o.GetName(), err))
	}
	return nil
}

// tasksOf lists from api the tasks of operation o (of any kind): those
// labelled with its name, when o is in the agent's namespace agent, and
// none otherwise (a task's operation is the one of its name there).
func tasksOf(ctx context.Context, api client.Reader, agent string, o client.Object) ([]v1alpha1.StyrminTask, error) {
	if o.GetNamespace() != agent {
		return nil, nil
	}
	var tasks v1alpha1.StyrminTaskList
	if err := api.List(ctx, &tasks, client.MatchingLabels{v1alpha1.LabelOperation: o.GetName()}); err != nil {
		return nil, fmt.Errorf("listing the tasks of %s: %w", o.GetName(), err)
	}
	return tasks.Items, nil
}
