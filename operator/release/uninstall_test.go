package release

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestUninstallWithoutRecordsDeletesTheKnownObjectsOutsideTheNamespace
// pins the uninstall of a release whose records are gone (a namespace
// deleted by hand takes them with everything else in it): the objects
// the agent knows of otherwise, the last revision it applied or the
// StyrminDeployment's inventory, are deleted when they are outside the
// namespace (a ClusterRoleBinding, a ConfigMap in a namespace a policy
// adds), but one annotated helm.sh/resource-policy: keep on the live
// object and one another release's annotations name; those in the
// namespace are left to the namespace controller. An inventory entry of a
// cluster-scoped kind recorded with the release's namespace (what
// Inventory records for a custom kind it does not know) is scoped as the
// cluster serves it.
func TestUninstallWithoutRecordsDeletesTheKnownObjectsOutsideTheNamespace(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	for _, ns := range []string{"known", "inventory", "elsewhere", "prod"} {
		e.namespace(t, ns)
	}
	// Another release's binding, which an inventory may name (made again
	// by that release since).
	theirs := releaseReq("prod", clusterRoleBinding("theirs-view", "prod"))
	if _, _, err := e.helm.Apply(ctx, theirs, nil, 0); err != nil {
		t.Fatal(err)
	}
	crbExists := func(name string) bool {
		t.Helper()
		_, err := e.cs.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	for _, by := range []string{"known", "inventory"} {
		t.Run(by, func(t *testing.T) {
			ns := by
			objects := []drivers.Object{
				configMap(ns, "own", "1"), configMap("elsewhere", ns+"-away", "1"),
				clusterRoleBinding(ns+"-view", ns), clusterRoleBinding(ns+"-kept", ns),
			}
			rev, _, err := e.helm.Apply(ctx, releaseReq(ns, objects...), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			keep := []byte(`{"metadata":{"annotations":{"helm.sh/resource-policy":"keep"}}}`)
			if _, err := e.cs.RbacV1().ClusterRoleBindings().Patch(ctx, ns+"-kept", types.MergePatchType, keep, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := e.cs.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "owner=helm"}); err != nil {
				t.Fatal(err)
			}
			var known *Revision
			var inventory []v1alpha1.ObjectRef
			if by == "known" {
				known = rev
			} else {
				inventory = Inventory(objects, ns)
				for i := range inventory {
					if inventory[i].Name == ns+"-view" {
						inventory[i].Namespace = ns
					}
				}
				inventory = append(inventory, v1alpha1.ObjectRef{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding", Name: "theirs-view"})
			}
			if err := e.helm.Uninstall(ctx, ns, "app", known, inventory); err != nil {
				t.Fatal(err)
			}
			if crbExists(ns + "-view") {
				t.Errorf("ClusterRoleBinding %s-view is left", ns)
			}
			if got := e.configMaps(t, "elsewhere"); got != "" {
				t.Errorf("config maps left in namespace elsewhere: %q", got)
			}
			if !crbExists(ns + "-kept") {
				t.Errorf("ClusterRoleBinding %s-kept, annotated keep, was deleted", ns)
			}
			if !crbExists("theirs-view") {
				t.Error("another release's ClusterRoleBinding theirs-view was deleted")
			}
			if got := e.configMaps(t, ns); got != "own=1" {
				t.Errorf("config maps in the release's namespace %q, want own=1 left to the namespace controller", got)
			}
		})
	}
}
