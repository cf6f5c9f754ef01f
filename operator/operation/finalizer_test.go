package operation_test

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/cachetest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
)

// TestAnotherControllersFinalizerAddedAfterTheCachedCopyIsKept pins the
// operations' finalizer write on the copy it was decided on. Another
// controller (a legal hold on backups) added its finalizer after the copy
// the cache held was read; the agent's merge patch, built on that copy,
// wrote the finalizers list whole and dropped it, and the backup could go
// before that controller's clean-up ran. The write conflicts, and the
// next look, on a copy that has it, adds the agent's beside it.
func TestAnotherControllersFinalizerAddedAfterTheCachedCopyIsKept(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	const hold = "example.com/legal-hold"
	b := &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "nightly"},
		Spec:       v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "data"},
	}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	before := b.DeepCopy()
	b.Finalizers = append(b.Finalizers, hold)
	if err := cl.Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Let the test cluster's namespace go.
		var left v1alpha1.StyrminBackup
		if err := cl.Get(ctx, client.ObjectKeyFromObject(b), &left); err == nil {
			left.Finalizers = nil
			_ = cl.Update(ctx, &left)
		}
	})

	behind, err := operation.NewBackupReconciler(options(cachetest.Stale{Client: cl, Copy: before}, cl))
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, behind, b)
	if !slices.Contains(b.Finalizers, hold) {
		t.Fatalf("finalizers %v after a reconcile from a copy read before %s was added: want it kept", b.Finalizers, hold)
	}
	caughtUp, err := operation.NewBackupReconciler(options(cl, cl))
	if err != nil {
		t.Fatal(err)
	}
	reconcileAndRead(ctx, t, cl, caughtUp, b)
	if !slices.Contains(b.Finalizers, hold) || !slices.Contains(b.Finalizers, operation.Finalizer) {
		t.Fatalf("finalizers %v once the cache caught up: want %s and %s", b.Finalizers, hold, operation.Finalizer)
	}
}
