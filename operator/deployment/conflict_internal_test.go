package deployment

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/outcome"
	"github.com/styrmin/styrmin/operator/release"
)

// TestAConflictStallsUnlessTheOtherReleaseIsBeingUninstalled: an object
// another field manager owns, or one with no release's annotations, or
// one another release holds, stalls the apply (no writer lets go by
// itself); one a release holds whose deployment, or namespace, is being
// deleted is retried, as its uninstall removes the object (a deployment
// moved to another environment whose new one came first).
func TestAConflictStallsUnlessTheOtherReleaseIsBeingUninstalled(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	sd := func(ns string, deleting, tombstone bool) client.Object {
		o := &v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns}}
		if deleting {
			o.DeletionTimestamp, o.Finalizers = &now, []string{"styrmin.io/release"}
		}
		if tombstone {
			o.Spec.Kind = v1alpha1.KindTombstone
		}
		return o
	}
	terminating := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "old-ns", DeletionTimestamp: &now, Finalizers: []string{"kubernetes"}}}
	r := &Reconciler{apiReader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		sd("prod", false, false), sd("deleting", true, false), sd("tomb", false, true), terminating,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod"}},
	).Build()}
	ref := v1alpha1.ObjectRef{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding", Name: "api-view"}
	for _, tc := range []struct {
		name     string
		conflict *release.ConflictError
		stalled  bool
	}{
		{"another field manager", &release.ConflictError{Object: ref, Managers: []string{"kubectl"}, Err: errors.New("conflict")}, true},
		{"a running release's", &release.ConflictError{Object: ref, Release: "prod/api"}, true},
		{"a release no deployment holds", &release.ConflictError{Object: ref, Release: "gone/api"}, true},
		{"a release whose deployment is being deleted", &release.ConflictError{Object: ref, Release: "deleting/api"}, false},
		{"a tombstone's release", &release.ConflictError{Object: ref, Release: "tomb/api"}, false},
		{"a release whose namespace is being deleted", &release.ConflictError{Object: ref, Release: "old-ns/api"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.conflictError(context.Background(), tc.conflict, tc.conflict)
			o := outcome.Map(err, "Fallback")
			if (o.Kind == outcome.Stall) != tc.stalled || o.Reason != v1alpha1.ReasonApplyConflict {
				t.Errorf("%v: outcome %+v, want stalled %v with reason %s", err, o, tc.stalled, v1alpha1.ReasonApplyConflict)
			}
		})
	}
}
