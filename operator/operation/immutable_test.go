package operation_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
)

// change is one edit of an object's spec and what the API server says to
// it: refused naming the field and the way out (want), or accepted ("").
type change[T client.Object] struct {
	name string
	edit func(T)
	want string
}

// tryChanges applies each change to a fresh read of key as a merge patch,
// as styrminctl and the controllers write, and checks the answer. A change
// the API server takes stays, so the accepted ones leave the spec the
// refused ones start from as it was, or come last.
func tryChanges[T client.Object](ctx context.Context, t *testing.T, cl client.Client, key client.ObjectKey, fresh func() T, changes []change[T]) {
	t.Helper()
	for _, c := range changes {
		o := fresh()
		if err := cl.Get(ctx, key, o); err != nil {
			t.Fatal(err)
		}
		base := o.DeepCopyObject().(client.Object)
		c.edit(o)
		err := cl.Patch(ctx, o, client.MergeFrom(base))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %s is refused: %v", key.Name, c.name, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: %s is accepted, want it refused with %q", key.Name, c.name, c.want)
		case c.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %s is refused with %v, want an Invalid error saying %q", key.Name, c.name, err, c.want)
		}
	}
}

// TestTheSpecsOfBackupsAndRestoresCannotChangeButARestoresRetry pins, on
// a real API server, that a StyrminBackup's and a StyrminRestore's spec is
// fixed once they are created: a restore's tasks, what retention and a
// backup's deletion keep for it, and a retry's tasks follow spec.backup;
// a backup's deletion runs the deleteBackup hook of spec.environment with
// that environment's credentials. An edit would have them act on
// artefacts that are not what the spec says. Every field is refused,
// set, changed or unset, with a message naming it and saying to make a
// new object; what the product writes goes through: the finalizer, the
// status, and spec.retry (`styrminctl restore retry`).
func TestTheSpecsOfBackupsAndRestoresCannotChangeButARestoresRetry(t *testing.T) {
	t.Parallel()
	ctx, cl := operations(t)
	const ns = "styrmin-system"
	create := func(o client.Object) {
		t.Helper()
		if err := cl.Create(ctx, o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}

	create(&v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "whole"},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "data"}})
	create(&v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "some"},
		Spec: v1alpha1.StyrminBackupSpec{Environment: "data", Deployments: []string{"hub", "web"}}})
	backup := func() *v1alpha1.StyrminBackup { return &v1alpha1.StyrminBackup{} }
	const (
		cluster     = "spec.cluster is immutable: create a new StyrminBackup"
		environment = "spec.environment is immutable: create a new StyrminBackup"
		backupDeps  = "spec.deployments is immutable: create a new StyrminBackup"
	)
	tryChanges(ctx, t, cl, client.ObjectKey{Namespace: ns, Name: "whole"}, backup, []change[*v1alpha1.StyrminBackup]{
		{name: "another environment", edit: func(b *v1alpha1.StyrminBackup) { b.Spec.Environment = "prod" }, want: environment},
		{name: "another cluster", edit: func(b *v1alpha1.StyrminBackup) { b.Spec.Cluster = "other" }, want: cluster},
		{name: "the cluster unset", edit: func(b *v1alpha1.StyrminBackup) { b.Spec.Cluster = "" }, want: cluster},
		{name: "deployments set", edit: func(b *v1alpha1.StyrminBackup) { b.Spec.Deployments = []string{"hub"} }, want: backupDeps},
		{name: "the finalizer", edit: func(b *v1alpha1.StyrminBackup) { b.Finalizers = []string{operation.Finalizer} }},
	})
	tryChanges(ctx, t, cl, client.ObjectKey{Namespace: ns, Name: "some"}, backup, []change[*v1alpha1.StyrminBackup]{
		{name: "a cluster set", edit: func(b *v1alpha1.StyrminBackup) { b.Spec.Cluster = "local" }, want: cluster},
		{name: "a deployment fewer", edit: func(b *v1alpha1.StyrminBackup) { b.Spec.Deployments = []string{"hub"} }, want: backupDeps},
		{name: "a deployment more", edit: func(b *v1alpha1.StyrminBackup) { b.Spec.Deployments = []string{"hub", "web", "db"} }, want: backupDeps},
		{name: "the deployments unset", edit: func(b *v1alpha1.StyrminBackup) { b.Spec.Deployments = nil }, want: backupDeps},
		// A set in another order is the same set.
		{name: "the deployments in another order", edit: func(b *v1alpha1.StyrminBackup) { b.Spec.Deployments = []string{"web", "hub"} }},
	})
	// The status is the agent's to write, through its own subresource.
	var b v1alpha1.StyrminBackup
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "whole"}, &b); err != nil {
		t.Fatal(err)
	}
	b.Status.Phase = v1alpha1.OperationSucceeded
	if err := cl.Status().Update(ctx, &b); err != nil {
		t.Errorf("a backup's status is refused: %v", err)
	}

	create(&v1alpha1.StyrminRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "all"},
		Spec: v1alpha1.StyrminRestoreSpec{Backup: "whole"}})
	create(&v1alpha1.StyrminRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hub"},
		Spec: v1alpha1.StyrminRestoreSpec{Backup: "some", Deployments: []string{"hub"}, Retry: "first"}})
	restore := func() *v1alpha1.StyrminRestore { return &v1alpha1.StyrminRestore{} }
	const (
		fromBackup  = "spec.backup is immutable: create a new StyrminRestore"
		restoreDeps = "spec.deployments is immutable: create a new StyrminRestore"
	)
	tryChanges(ctx, t, cl, client.ObjectKey{Namespace: ns, Name: "all"}, restore, []change[*v1alpha1.StyrminRestore]{
		{name: "another backup", edit: func(r *v1alpha1.StyrminRestore) { r.Spec.Backup = "some" }, want: fromBackup},
		{name: "deployments set", edit: func(r *v1alpha1.StyrminRestore) { r.Spec.Deployments = []string{"hub"} }, want: restoreDeps},
		{name: "the finalizer", edit: func(r *v1alpha1.StyrminRestore) { r.Finalizers = []string{operation.Finalizer} }},
		{name: "a retry set", edit: func(r *v1alpha1.StyrminRestore) { r.Spec.Retry = "1" }},
	})
	tryChanges(ctx, t, cl, client.ObjectKey{Namespace: ns, Name: "hub"}, restore, []change[*v1alpha1.StyrminRestore]{
		{name: "another deployment", edit: func(r *v1alpha1.StyrminRestore) { r.Spec.Deployments = []string{"web"} }, want: restoreDeps},
		{name: "the deployments unset", edit: func(r *v1alpha1.StyrminRestore) { r.Spec.Deployments = nil }, want: restoreDeps},
		{name: "a retry with another backup", edit: func(r *v1alpha1.StyrminRestore) { r.Spec.Retry, r.Spec.Backup = "second", "whole" }, want: fromBackup},
		{name: "a new retry", edit: func(r *v1alpha1.StyrminRestore) { r.Spec.Retry = "second" }},
		{name: "the retry unset", edit: func(r *v1alpha1.StyrminRestore) { r.Spec.Retry = "" }},
	})

	// styrminctl restore retry, on a failed restore, is taken.
	var rs v1alpha1.StyrminRestore
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hub"}, &rs); err != nil {
		t.Fatal(err)
	}
	rs.Status.Phase, rs.Status.Message = v1alpha1.OperationFailed, "hub: the restore hook failed"
	if err := cl.Status().Update(ctx, &rs); err != nil {
		t.Fatalf("a restore's status is refused: %v", err)
	}
	if err := operation.RetryRestore(ctx, cl, client.ObjectKeyFromObject(&rs), time.Now()); err != nil {
		t.Fatalf("styrminctl restore retry is refused: %v", err)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(&rs), &rs); err != nil || rs.Spec.Retry == "" {
		t.Fatalf("after the retry: spec.retry %q (%v), want the new token", rs.Spec.Retry, err)
	}
}
