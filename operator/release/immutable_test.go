package release

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAnUpgradeChangingAFieldThatCannotChangeAppliesNothing: an upgrade
// that changes a Deployment's selector (or a StatefulSet's claim
// templates, a RoleBinding's roleRef, a claim's storage class) was applied
// object by object until the API server refused that one: the ConfigMaps
// before it ran the new revision while the workload ran the old one, its
// mounted files changing under the old pods, and a failed revision was
// recorded at each retry. Its objects are now tried (a dry run) first:
// the refusal names the object and the field, says what to do, and
// nothing of the revision is applied or recorded.
func TestAnUpgradeChangingAFieldThatCannotChangeAppliesNothing(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "immutable"
	e.namespace(t, ns)
	r1, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), webDeployment(ns, "nginx:1.27")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	web := webDeployment(ns, "nginx:1.28")
	web.YAML = []byte(strings.ReplaceAll(string(web.YAML), "{app: web}", "{app: web2}"))
	_, _, err = e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "2"), web), r1, 1)
	if err == nil {
		t.Fatal("an upgrade changing the Deployment's selector was applied")
	}
	for _, want := range []string{"Deployment/immutable/web", "spec.selector", "immutable", "nothing of the revision was applied",
		"kubectl delete deployment.apps -n immutable web"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
	if !apierrors.IsInvalid(err) {
		t.Errorf("the API server's refusal is lost (the deployment stalls on it): %v", err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Errorf("no API status in %v", err)
	}
	cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{})
	if err != nil || cm.Data["v"] != "1" {
		t.Fatalf("ConfigMap a holds %v (%v); want the revision before's 1: nothing of the refused one applied", cm.Data, err)
	}
	e.requireWeb(t, ns, 1, "nginx:1.27", "after the refused upgrade,")
	if got := e.history(t, ns, "app"); got != "1:deployed" {
		t.Fatalf("history %q, want 1:deployed: nothing was applied, so no revision is recorded", got)
	}

	// A binding's roleRef, which the API server says "cannot change".
	r2, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), webDeployment(ns, "nginx:1.27"), roleBinding(ns, "view")), r1, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "3"), webDeployment(ns, "nginx:1.27"), roleBinding(ns, "edit")), r2, 2)
	if err == nil || !strings.Contains(err.Error(), "RoleBinding/immutable/readers") || !strings.Contains(err.Error(), "roleRef") ||
		!strings.Contains(err.Error(), "nothing of the revision was applied") {
		t.Fatalf("an upgrade changing a RoleBinding's roleRef: %v; want it refused before anything was applied, naming it", err)
	}
	if cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{}); err != nil || cm.Data["v"] != "1" {
		t.Fatalf("ConfigMap a holds %v (%v); want 1", cm.Data, err)
	}
}

// roleBinding binds the ClusterRole role to the group readers in ns.
func roleBinding(ns, role string) drivers.Object {
	y := "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: readers\n  namespace: " + ns +
		"\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: " + role + "}\nsubjects:\n- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: readers}\n"
	return drivers.Object{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding", Name: "readers", Namespace: ns, Component: "app", YAML: []byte(y)}
}

// TestOnlyAChangeOfAFieldThatCannotChangeIsTriedFirst: the dry run costs
// a request, so the common upgrade (an image, a template, a ConfigMap's
// data) makes none; a selector, a roleRef, or any change of a ConfigMap
// the revision before made immutable is tried.
func TestOnlyAChangeOfAFieldThatCannotChangeIsTriedFirst(t *testing.T) {
	asJSON := func(o drivers.Object) []byte {
		b, err := yaml.YAMLToJSON(o.YAML)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ref := func(o drivers.Object) v1alpha1.ObjectRef {
		return v1alpha1.ObjectRef{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
	}
	web := webDeployment("ns", "nginx:1.27")
	moved := webDeployment("ns", "nginx:1.27")
	moved.YAML = []byte(strings.ReplaceAll(string(moved.YAML), "{app: web}", "{app: web2}"))
	frozen := configMap("ns", "a", "1")
	frozen.YAML = append(frozen.YAML, "immutable: true\n"...)
	for _, tc := range []struct {
		name     string
		old, now drivers.Object
		want     bool
	}{
		{"a new image", web, webDeployment("ns", "nginx:1.28"), false},
		{"a new selector", web, moved, true},
		{"a ConfigMap's data", configMap("ns", "a", "1"), configMap("ns", "a", "2"), false},
		{"an immutable ConfigMap's data", frozen, configMap("ns", "a", "2"), true},
		{"a roleRef", roleBinding("ns", "view"), roleBinding("ns", "edit"), true},
	} {
		if got := changesUnchangeable(ref(tc.now), asJSON(tc.old), asJSON(tc.now)); got != tc.want {
			t.Errorf("%s: changesUnchangeable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAChangeThatCannotApplyIsFoundAfterAFailedRevisionThatNeverReachedIt:
// a failed revision that stopped before the Deployment (another manager's
// ConfigMap) lists its new selector though the cluster never ran it; its
// retry, read from the history (the status lost), compares with the
// revision that deployed too, and applies nothing.
func TestAChangeThatCannotApplyIsFoundAfterAFailedRevisionThatNeverReachedIt(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "immutable-retry"
	e.namespace(t, ns)
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), webDeployment(ns, "nginx:1.27")), nil, 0); err != nil {
		t.Fatal(err)
	}
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: ns}, Data: map[string]string{"v": "theirs"}}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Create(ctx, theirs, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}
	// Deleted meanwhile, so revision 2's new selector was no change; it
	// fails before it reaches it, and the Deployment is made again as it
	// was (an older agent, a restore of it).
	old, err := e.cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cs.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	web := webDeployment(ns, "nginx:1.28")
	web.YAML = []byte(strings.ReplaceAll(string(web.YAML), "{app: web}", "{app: web2}"))
	req := releaseReq(ns, configMap(ns, "a", "2"), configMap(ns, "t", "ours"), web)
	if _, _, err := e.helm.Apply(ctx, req, nil, 0); !apierrors.IsConflict(err) {
		t.Fatalf("revision 2 over another manager's ConfigMap: %v, want a conflict", err)
	}
	if got := e.history(t, ns, "app"); got != "1:deployed 2:failed" {
		t.Fatalf("history %q, want revision 2 failed", got)
	}
	old.ResourceVersion, old.UID, old.ManagedFields = "", "", nil
	if _, err := e.cs.AppsV1().Deployments(ns).Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cs.CoreV1().ConfigMaps(ns).Delete(ctx, "t", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	req.Objects[0] = configMap(ns, "a", "3")
	_, _, err = e.helm.Apply(ctx, req, nil, 0)
	if err == nil || !strings.Contains(err.Error(), "spec.selector") || !strings.Contains(err.Error(), "nothing of the revision was applied") {
		t.Fatalf("the retry: %v; want the selector's change refused before anything was applied", err)
	}
	if cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{}); err != nil || cm.Data["v"] != "2" {
		t.Fatalf("ConfigMap a holds %v (%v); want 2, the failed revision's, untouched by the refused retry", cm.Data, err)
	}
}
