package source

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// RequestSync asks the elected replica to sync now: it sets the
// styrmin.io/requested-at annotation of the StyrminSource key to at. Any
// replica may call it (the webhook receiver runs on each); WatchRequests
// on the elected one reacts. It is a merge patch of one annotation, so
// replicas never conflict. A StyrminSource that does not exist yet is no
// error: its syncer has not made its first sync, which it makes at start.
func RequestSync(ctx context.Context, c client.Writer, key types.NamespacedName, at time.Time) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{v1alpha1.AnnotationRequestedAt: at.UTC().Format(time.RFC3339Nano)},
	}})
	if err != nil {
		return err
	}
	src := &v1alpha1.StyrminSource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	err = c.Patch(ctx, src, client.RawPatch(types.MergePatchType, patch))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("requesting a sync on StyrminSource %s: %w", key, err)
	}
	return nil
}

// WatchRequests registers a controller, run on the elected replica only,
// that calls each of triggers (the syncer's and the locker's Trigger) when
// the styrmin.io/requested-at annotation of StyrminSource key changes.
// Triggers merge, so an annotation seen again after a restart costs at
// most one extra sync.
func WatchRequests(mgr manager.Manager, key types.NamespacedName, triggers ...func()) error {
	requested := func(o client.Object) string { return o.GetAnnotations()[v1alpha1.AnnotationRequestedAt] }
	ours := func(o client.Object) bool { return o.GetNamespace() == key.Namespace && o.GetName() == key.Name }
	changed := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return ours(e.Object) && requested(e.Object) != "" },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return ours(e.ObjectNew) && requested(e.ObjectNew) != requested(e.ObjectOld)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	err := ctrl.ControllerManagedBy(mgr).
		Named("styrminsource-requests").
		For(&v1alpha1.StyrminSource{}, ctrl.WithPredicates(changed)).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			for _, t := range triggers {
				t()
			}
			return reconcile.Result{}, nil
		}))
	if err != nil {
		return fmt.Errorf("watching sync requests on StyrminSource %s: %w", key, err)
	}
	return nil
}
